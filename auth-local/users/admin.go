package users

import (
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/tabcast/tabcast/plugins/atomicfile"
	"os"
)

// initialPasswordLen is the length of the generated admin password
// (~140 bits from a 57-symbol alphabet).
const initialPasswordLen = 24

const passwordAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"

// RandomPassword returns n characters drawn uniformly from an unambiguous
// alphanumeric alphabet.
func RandomPassword(n int) (string, error) {
	out := make([]byte, n)
	buf := make([]byte, 1)
	// Rejection sampling keeps the distribution uniform.
	limit := 256 - 256%len(passwordAlphabet)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("random password: %w", err)
		}
		if int(buf[0]) >= limit {
			continue
		}
		out[i] = passwordAlphabet[int(buf[0])%len(passwordAlphabet)]
		i++
	}
	return string(out), nil
}

// ErrPasswordFile marks an EnsureAdmin failure to write the password file
// (as opposed to the users file).
var ErrPasswordFile = errors.New("cannot write the initial password file")

// EnsureAdmin creates the user "admin" with a random password that must be
// changed at first login, when the store has no users at all. The password
// is written to passwordFile (mode 0600) before the user exists, so it is
// never lost; it is also returned for the caller to show once. With users
// present it does nothing.
func EnsureAdmin(store *Store, passwordFile string) (created bool, password string, err error) {
	if len(store.List()) > 0 {
		return false, "", nil
	}
	pw, err := RandomPassword(initialPasswordLen)
	if err != nil {
		return false, "", err
	}
	if err := atomicfile.Write(passwordFile, []byte(pw+"\n"), 0o600); err != nil {
		return false, "", fmt.Errorf("initial admin password: %w: %w", ErrPasswordFile, err)
	}
	err = store.mutateAdd("admin", pw, RoleAdmin, true, true)
	if err != nil {
		os.Remove(passwordFile)
		if errors.Is(err, errNotEmpty) {
			// Another process created users meanwhile.
			return false, "", nil
		}
		return false, "", fmt.Errorf("initial admin: %w", err)
	}
	return true, pw, nil
}
