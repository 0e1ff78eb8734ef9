package users

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are the argon2id cost parameters of a password hash.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32
	Threads uint8
	SaltLen int
	KeyLen  int
}

// DefaultParams cost about 90 ms per hash on the 2-core appliance reference
// machine (measured: m=64MiB,t=2,p=2 ≈ 92 ms; t=3 was ≈ 178 ms, too slow for
// a login under rate limiting; m=32MiB,t=3 ≈ 69 ms).
var DefaultParams = Params{Memory: 64 * 1024, Time: 2, Threads: 2, SaltLen: 16, KeyLen: 32}

// Bounds on parameters read back from a file, so a tampered or hostile hash
// string cannot make Verify allocate gigabytes or spin for minutes.
const (
	maxMemory  = 1 << 20 // 1 GiB in KiB
	maxTime    = 16
	maxThreads = 16
	minSalt    = 8
	maxSalt    = 64
	minKey     = 16
	maxKey     = 64
)

var errBadHash = errors.New("malformed password hash")

var b64 = base64.RawStdEncoding

// HashPassword returns a PHC-style argon2id string with a fresh random salt:
// $argon2id$v=19$m=65536,t=2,p=2$<salt>$<hash>.
func HashPassword(password []byte, p Params) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	key := argon2.IDKey(password, salt, p.Time, p.Memory, p.Threads, uint32(p.KeyLen))
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

type parsedHash struct {
	p    Params
	salt []byte
	key  []byte
}

func parseHash(s string) (parsedHash, error) {
	parts := strings.Split(s, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, key
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return parsedHash{}, errBadHash
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return parsedHash{}, errBadHash
	}
	var m, t uint32
	var p uint8
	n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p)
	if err != nil || n != 3 || fmt.Sprintf("m=%d,t=%d,p=%d", m, t, p) != parts[3] {
		return parsedHash{}, errBadHash
	}
	if t < 1 || t > maxTime || p < 1 || p > maxThreads || m < 8*uint32(p) || m > maxMemory {
		return parsedHash{}, errBadHash
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < minSalt || len(salt) > maxSalt {
		return parsedHash{}, errBadHash
	}
	key, err := b64.DecodeString(parts[5])
	if err != nil || len(key) < minKey || len(key) > maxKey {
		return parsedHash{}, errBadHash
	}
	return parsedHash{p: Params{Memory: m, Time: t, Threads: p, SaltLen: len(salt), KeyLen: len(key)}, salt: salt, key: key}, nil
}

// CheckHash reports whether s is a hash this store accepts (PHC argon2id
// within its parameter bounds). The error never quotes s.
func CheckHash(s string) error {
	_, err := parseHash(s)
	return err
}

// VerifyPassword reports whether password matches the encoded hash, using
// the parameters stored in it. A malformed hash never matches.
func VerifyPassword(password []byte, encoded string) bool {
	h, err := parseHash(encoded)
	if err != nil {
		return false
	}
	got := argon2.IDKey(password, h.salt, h.p.Time, h.p.Memory, h.p.Threads, uint32(h.p.KeyLen))
	return subtle.ConstantTimeCompare(got, h.key) == 1
}
