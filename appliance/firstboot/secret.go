package firstboot

import (
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Patterns of secret material that may reach a message through a YAML
// error before the file could be decoded.
var secretREs = []*regexp.Regexp{
	regexp.MustCompile(`\$argon2[a-z]*\$[^\s"'` + "`" + `]*`),
	regexp.MustCompile(`AAAA[A-Za-z0-9+/=]{8,}`),
}

// secretsOf collects the secret values of a set-up file, decodable or not:
// every string under a secret-sounding key (adminPasswordHash,
// authorizedKeys, config passwords and tokens), wherever it is.
func secretsOf(data []byte) []string {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil
	}
	var out []string
	collectSecrets(&doc, false, &out)
	return out
}

func collectSecrets(n *yaml.Node, secret bool, out *[]string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			collectSecrets(n.Content[i+1], secret || secretName(n.Content[i].Value), out)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			collectSecrets(c, secret, out)
		}
	case yaml.ScalarNode:
		if secret && len(n.Value) >= 8 {
			*out = append(*out, n.Value)
		}
	}
}

func secretName(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"secret", "password", "token", "key", "hash", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// redact removes every secret from msg.
func redact(msg string, secrets []string) string {
	// Longest first, so a secret containing another is removed whole.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	for _, re := range secretREs {
		msg = re.ReplaceAllString(msg, "[redacted]")
	}
	return msg
}
