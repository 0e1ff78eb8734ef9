// Package update writes signed root file system updates into the inactive
// slot of the Tabcast appliance's A/B layout and switches systemd-boot to
// it (see docs/operations.md, "Updates (A/B)", and image/README.md).
//
// Keys are ed25519. Both key files are text:
//
//   - the signing key (update-signing.key, mode 0600): comment lines
//     starting with '#', and one line holding the base64 (standard, padded)
//     of the 32-byte ed25519 seed;
//   - the public keys (update.pub): one key per line, the base64 of the
//     32-byte ed25519 public key, optionally followed by whitespace and a
//     comment; blank lines and lines starting with '#' are ignored. A
//     bundle is accepted when any listed key verifies it, so a new key is
//     rolled out by listing both keys in one image, and the old one dropped
//     in a later image.
package update

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Key file names written by GenerateKey.
const (
	PrivateKeyFile = "update-signing.key"
	PublicKeyFile  = "update.pub"
)

// maxKeyFile bounds what is read of a key file.
const maxKeyFile = 64 << 10

// PublicKey is one trusted key.
type PublicKey struct {
	Key     ed25519.PublicKey
	Comment string
}

// KeyID is a short fingerprint of a public key: the first 8 bytes of the
// sha256 of its 32 bytes, hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// FormatPublicKey is pub's line in an update.pub file.
func FormatPublicKey(pub ed25519.PublicKey, comment string) string {
	line := base64.StdEncoding.EncodeToString(pub)
	comment = strings.Join(strings.Fields(comment), " ")
	if comment != "" {
		line += " " + comment
	}
	return line + "\n"
}

// GenerateKey writes a new key pair into dir: PrivateKeyFile (0600) and
// PublicKeyFile (0644). Existing files are never replaced. It returns both
// paths.
func GenerateKey(dir, comment string) (priv, pub string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	priv, pub = filepath.Join(dir, PrivateKeyFile), filepath.Join(dir, PublicKeyFile)
	for _, p := range []string{priv, pub} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("%s already exists; refusing to replace a key", p)
		}
	}
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	body := "# tabcast update signing key (ed25519 seed, base64), key id " + KeyID(pk) + ".\n" +
		"# SECRET: whoever holds it can install software on every appliance trusting it.\n" +
		base64.StdEncoding.EncodeToString(sk.Seed()) + "\n"
	if err := writeNew(priv, []byte(body), 0o600); err != nil {
		return "", "", err
	}
	if comment == "" {
		comment = "tabcast-update " + KeyID(pk)
	}
	if err := writeNew(pub, []byte(FormatPublicKey(pk, comment)), 0o644); err != nil {
		os.Remove(priv)
		return "", "", err
	}
	return priv, pub, nil
}

// writeNew creates path (it must not exist) with mode perm and data.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil { // umask
		f.Close()
		os.Remove(path)
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s: larger than %d bytes, not a key file", path, maxKeyFile)
	}
	return b, nil
}

// LoadPrivateKey reads a signing key written by GenerateKey. It refuses a
// file that group or others may read. Errors never include key material.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("signing key %s has mode %04o: it must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	var seed []byte
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if seed != nil {
			return nil, fmt.Errorf("signing key %s: more than one key line", path)
		}
		s, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(s) != ed25519.SeedSize {
			return nil, fmt.Errorf("signing key %s: not a base64 ed25519 seed", path)
		}
		seed = s
	}
	if seed == nil {
		return nil, fmt.Errorf("signing key %s: no key line", path)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// LoadPublicKeys reads an update.pub file: at least one key.
func LoadPublicKeys(path string) ([]PublicKey, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, fmt.Errorf("trusted keys: %w", err)
	}
	var keys []PublicKey
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		field, comment, _ := strings.Cut(line, " ")
		if j := strings.IndexAny(field, "\t"); j >= 0 {
			field, comment = field[:j], field[j+1:]+" "+comment
		}
		k, err := base64.StdEncoding.DecodeString(field)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("trusted keys %s line %d: not a base64 ed25519 public key", path, i+1)
		}
		keys = append(keys, PublicKey{Key: ed25519.PublicKey(k), Comment: strings.TrimSpace(comment)})
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("trusted keys %s: no key", path)
	}
	return keys, nil
}

// verifyAny returns the key that signed msg, or an error.
func verifyAny(keys []PublicKey, msg, sig []byte) (*PublicKey, error) {
	return verifySigned(keys, msg, sig, "the bundle's")
}

// verifySigned is verifyAny for any artifact; whose names it in errors
// ("the bundle's", "the backup's").
func verifySigned(keys []PublicKey, msg, sig []byte, whose string) (*PublicKey, error) {
	if len(sig) != ed25519.SignatureSize {
		return nil, errors.New("manifest.sig is not an ed25519 signature")
	}
	for i := range keys {
		if ed25519.Verify(keys[i].Key, msg, sig) {
			return &keys[i], nil
		}
	}
	return nil, fmt.Errorf("%s signature does not verify with any trusted key (%d trusted)", whose, len(keys))
}
