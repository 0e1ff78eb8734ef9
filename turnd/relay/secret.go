package relay

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // TURN REST credentials are HMAC-SHA1 by definition
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tabcast/tabcast/plugins/atomicfile"
	"io/fs"
	"os"
	"strings"
	"time"
)

// minSecretLen is the shortest secret accepted from a file (characters).
const minSecretLen = 32

// secret is one HMAC secret and the file it came from.
type secret struct {
	key  []byte
	tag  string // short fingerprint, safe to log and to keep per credential
	path string
	mod  time.Time
	size int64
}

func newSecret(key []byte, path string, fi fs.FileInfo) *secret {
	sum := sha256.Sum256(key)
	s := &secret{key: key, tag: hex.EncodeToString(sum[:6]), path: path}
	if fi != nil {
		s.mod, s.size = fi.ModTime(), fi.Size()
	}
	return s
}

// password is the TURN REST password of username: base64(HMAC-SHA1(key,
// username)), as pion's GenerateLongTermTURNRESTCredentials computes it
// with the file's text as shared secret.
func (s *secret) password(username string) string {
	mac := hmac.New(sha1.New, s.key)
	mac.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// changed reports whether the file no longer matches what was loaded.
func (s *secret) changed() bool {
	fi, err := os.Stat(s.path)
	return err != nil || !fi.ModTime().Equal(s.mod) || fi.Size() != s.size
}

// loadSecret reads a secret file. The whole trimmed text is the key (so the
// same file can serve another TURN REST implementation).
func loadSecret(path string) (*secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < minSecretLen {
		return nil, fmt.Errorf("%s: secret shorter than %d characters", path, minSecretLen)
	}
	return newSecret(key, path, fi), nil
}

// loadOrCreateSecret loads path, creating it with 32 random bytes
// (base64url text, mode 0600, written atomically) when it does not exist.
func loadOrCreateSecret(path string) (s *secret, created bool, err error) {
	s, err = loadSecret(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return s, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, err
	}
	text := base64.RawURLEncoding.EncodeToString(raw)
	if err := atomicfile.Write(path, []byte(text+"\n"), 0o600); err != nil {
		return nil, false, err
	}
	s, err = loadSecret(path)
	return s, err == nil, err
}
