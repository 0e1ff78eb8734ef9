package access

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// UserRecord is one user as the auth plugin's directory has it now.
type UserRecord struct {
	Role Role
	// Credential changes whenever the user's password is set or reset: an
	// opaque fingerprint, never a password or its hash.
	Credential string
}

// Directory lists the users of the auth plugin, when the core can read
// them (auth-local's users file; an LDAP or OIDC plugin has none). With a
// directory, a user it does not list holds no rights: their logins end and
// their tokens stop working.
type Directory interface {
	// Users returns every user when they may have changed since the last
	// call (changed true); otherwise changed is false and users nil. An
	// error leaves the users last read in force.
	Users() (users map[string]UserRecord, changed bool, err error)
}

// FileDirectory reads the users from a file that other processes write
// (the auth plugin, `tabcast users`), again only when the file changed.
type FileDirectory struct {
	path  string
	parse func([]byte) (map[string]UserRecord, error)

	mu     sync.Mutex
	stamp  fileStamp
	loaded bool
}

// NewFileDirectory reads path with parse. A missing file is a directory
// without users, as it is for the auth plugin.
func NewFileDirectory(path string, parse func([]byte) (map[string]UserRecord, error)) *FileDirectory {
	return &FileDirectory{path: path, parse: parse}
}

// Users implements Directory. A file that does not parse is reported once
// per version of it, not on every call.
func (d *FileDirectory) Users() (map[string]UserRecord, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// Stat before reading: a file replaced between the two is read again
	// on the next call, never missed.
	st, err := os.Stat(d.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if d.loaded && !d.stamp.ok {
			return nil, false, nil
		}
		d.stamp, d.loaded = fileStamp{}, true
		return map[string]UserRecord{}, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("users file: %w", err)
	}
	stamp := stampOf(st)
	if d.loaded && d.stamp.same(stamp) {
		return nil, false, nil
	}
	b, err := os.ReadFile(d.path)
	if err != nil {
		return nil, false, fmt.Errorf("users file: %w", err)
	}
	d.stamp = stamp
	users, err := d.parse(b)
	if err != nil {
		if !d.loaded {
			// Nothing was ever read: fail closed until the file parses.
			d.loaded = true
			return map[string]UserRecord{}, true, fmt.Errorf("users file %s: %w", d.path, err)
		}
		return nil, false, fmt.Errorf("users file %s: %w", d.path, err)
	}
	d.loaded = true
	return users, true, nil
}
