package firstboot

import (
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkHash accepts what auth-local's users store verifies: a PHC argon2id
// string ($argon2id$v=19$m=..,t=..,p=..$salt$key, unpadded base64) within
// the same parameter bounds (auth-local/users/hash.go; its parser is
// unexported and a plugin's, so it is mirrored, and the tests check the
// result against auth-local's real code). Errors never quote the hash.
func checkHash(s string) error {
	bad := errors.New(`not an auth-local password hash (want "$argon2id$v=19$m=65536,t=2,p=2$<salt>$<key>", e.g. from a Tabcast's users.yaml)`)
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != "v=19" {
		return bad
	}
	var m, t, p uint32
	if n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || n != 3 ||
		fmt.Sprintf("m=%d,t=%d,p=%d", m, t, p) != parts[3] {
		return bad
	}
	if t < 1 || t > 16 || p < 1 || p > 16 || m < 8*p || m > 1<<20 {
		return errors.New("argon2id parameters out of auth-local's bounds (t 1..16, p 1..16, m 8p..1048576 KiB)")
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) < 8 || len(salt) > 64 {
		return bad
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return bad
	}
	return nil
}

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
