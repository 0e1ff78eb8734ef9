package config

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Mask replaces secret values in Print's output.
const Mask = "****"

// secretWords mark a key name as secret; nonSecretParts are removed from the
// lower-cased name first so e.g. keyframeInterval is not one.
var (
	secretWords    = []string{"secret", "password", "passwd", "token", "key", "credential"}
	nonSecretParts = []string{"keyframe", "keyboard", "keyfile", "tokenfile", "passwordfile", "secretfile", "credentialttl", "credentialsfile"}
)

func isSecretName(name string) bool {
	n := strings.ToLower(name)
	for _, p := range nonSecretParts {
		n = strings.ReplaceAll(n, p, "")
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Print writes the effective configuration as YAML in the order of
// config.default.yaml, with secret values masked. plugins.sha256 values are
// not secret (they are published digests) and plugin names are never
// treated as secret key names.
func Print(w io.Writer, c *Config) error {
	if c == nil {
		return fmt.Errorf("config: print: nil config")
	}
	doc := printSection(schema, reflect.ValueOf(c).Elem())
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("config: print: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("config: print: %w", err)
	}
	return nil
}

func printSection(n *node, v reflect.Value) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, c := range n.children {
		fv := v.Field(c.index[len(c.index)-1])
		var val *yaml.Node
		switch {
		case c.kind == kSection:
			val = printSection(c, fv)
		case isSecretName(c.name):
			val = strNode(Mask)
		default:
			val = printLeaf(c, fv)
		}
		m.Content = append(m.Content, strNode(c.name), val)
	}
	return m
}

func printLeaf(c *node, v reflect.Value) *yaml.Node {
	switch c.kind {
	case kString:
		return strNode(v.String())
	case kBool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	case kInt:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}
	case kDuration:
		return strNode(time.Duration(v.Int()).String())
	case kStrings:
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, s := range v.Interface().([]string) {
			seq.Content = append(seq.Content, strNode(s))
		}
		if len(seq.Content) == 0 {
			seq.Style = yaml.FlowStyle // prints []
		}
		return seq
	case kStringMap:
		m := v.Interface().(map[string]string)
		out := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range sortedKeys(m) {
			out.Content = append(out.Content, strNode(k), strNode(m[k]))
		}
		if len(out.Content) == 0 {
			out.Style = yaml.FlowStyle // prints {}
		}
		return out
	case kPluginMaps:
		m := v.Interface().(map[string]map[string]any)
		out := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range sortedKeys(m) {
			out.Content = append(out.Content, strNode(k), printOpaque(m[k]))
		}
		if len(out.Content) == 0 {
			out.Style = yaml.FlowStyle
		}
		return out
	}
	return strNode(fmt.Sprint(v.Interface()))
}

// printOpaque renders a plugin subtree, masking secret-named keys at any depth.
func printOpaque(v any) *yaml.Node {
	switch t := v.(type) {
	case map[string]any:
		out := &yaml.Node{Kind: yaml.MappingNode}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val := printOpaque(t[k])
			if isSecretName(k) {
				val = strNode(Mask)
			}
			out.Content = append(out.Content, strNode(k), val)
		}
		if len(out.Content) == 0 {
			out.Style = yaml.FlowStyle
		}
		return out
	case []any:
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, item := range t {
			seq.Content = append(seq.Content, printOpaque(item))
		}
		if len(seq.Content) == 0 {
			seq.Style = yaml.FlowStyle
		}
		return seq
	default:
		n := &yaml.Node{}
		if err := n.Encode(t); err != nil {
			return strNode(fmt.Sprint(t))
		}
		return n
	}
}

func strNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// Sources lists the layers Load uses with these options, lowest first, for
// logs and doctor: "defaults", "file PATH", "env NAME,…", "flags --set KEY,…".
// It names variables, flags and keys, never values.
func Sources(o Options) []string {
	out := []string{"defaults"}
	if path, explicit := o.filePath(); explicit || fileExists(path) {
		out = append(out, "file "+path)
	}
	var vars []string
	for _, kv := range o.Environ {
		if name, _, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, EnvPrefix) {
			vars = append(vars, name)
		}
	}
	if len(vars) > 0 {
		sort.Strings(vars)
		out = append(out, "env "+strings.Join(vars, ","))
	}
	if fs := o.Flags; fs != nil {
		var flags []string
		sets, _ := fs.GetStringArray(FlagSet)
		for _, kv := range sets {
			key, _, _ := strings.Cut(kv, "=")
			flags = append(flags, "--set "+key)
		}
		for _, name := range []string{FlagListen, FlagLogLevel} {
			if fs.Changed(name) {
				flags = append(flags, "--"+name)
			}
		}
		if len(flags) > 0 {
			out = append(out, "flags "+strings.Join(flags, ","))
		}
	}
	return out
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
