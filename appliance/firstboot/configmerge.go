package firstboot

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// mergedComment marks the keys the set-up file set in config.yaml.
const mergedComment = "set by tabcast-firstboot.yaml"

// mergeConfig merges patch (a mapping) into the config.yaml text current,
// keeping its comments and key order: mappings merge key by key, anything
// else (scalars, lists) is replaced.
func mergeConfig(current []byte, patch *yaml.Node) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(current, &doc); err != nil {
		return nil, fmt.Errorf("current config.yaml is not valid YAML: %w", err)
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, HeadComment: "Tabcast appliance configuration (tabcast config print shows every key)."}
	}
	if len(doc.Content) == 0 {
		doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("current config.yaml is not a mapping")
	}
	mergeMapping(root, patch)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encode config.yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode config.yaml: %w", err)
	}
	return buf.Bytes(), nil
}

func mergeMapping(dst, src *yaml.Node) {
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		j := indexKey(dst, k.Value)
		switch {
		case j < 0:
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.Value}
			if v.Kind == yaml.MappingNode {
				key.HeadComment = mergedComment
			} else {
				key.LineComment = mergedComment
			}
			dst.Content = append(dst.Content, key, v)
		case v.Kind == yaml.MappingNode && dst.Content[j+1].Kind == yaml.MappingNode:
			mergeMapping(dst.Content[j+1], v)
		default:
			if dst.Content[j].LineComment == "" && dst.Content[j+1].LineComment == "" {
				dst.Content[j].LineComment = mergedComment
			}
			dst.Content[j+1] = v
		}
	}
}

func indexKey(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}
