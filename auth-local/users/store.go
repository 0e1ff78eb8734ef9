// Package users holds Tabcast's local user database (a YAML file of argon2id
// password hashes) and the auth-local plugin that authenticates against it.
// The file operations are exported for the `tabcast users` CLI.
package users

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/tabcast/tabcast/plugins/atomicfile"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// Roles a user can hold.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleViewer   = "viewer"
)

// Roles lists every valid role, most privileged first.
var Roles = []string{RoleAdmin, RoleOperator, RoleViewer}

// MinPasswordLen is the shortest password Add and SetPassword accept.
const MinPasswordLen = 12

// maxPasswordLen bounds argon2 input so a huge password is refused early.
const maxPasswordLen = 1024

// Errors returned by Store operations.
var (
	ErrNotFound     = errors.New("no such user")
	ErrExists       = errors.New("user already exists")
	ErrInvalidName  = errors.New("invalid user name: want [a-z0-9._-]{1,64}")
	ErrInvalidRole  = errors.New("invalid role: want admin, operator or viewer")
	ErrWeakPassword = fmt.Errorf("password too short: want at least %d characters", MinPasswordLen)
	ErrLongPassword = fmt.Errorf("password too long: at most %d bytes", maxPasswordLen)
	ErrLastAdmin    = errors.New("refusing to delete the last admin")
)

var nameRE = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)

// ValidName reports whether name is an acceptable user name.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// ValidRole reports whether role is one of Roles.
func ValidRole(role string) bool { return slices.Contains(Roles, role) }

// User is a user as shown to callers: never the hash.
type User struct {
	Name               string
	Role               string
	MustChangePassword bool
}

// record is a user as stored in the file.
type record struct {
	Name       string    `yaml:"name"`
	Role       string    `yaml:"role"`
	Hash       string    `yaml:"hash"`
	MustChange bool      `yaml:"must_change,omitempty"`
	Updated    time.Time `yaml:"updated"`
}

type fileFormat struct {
	Users []record `yaml:"users"`
}

// Store is the user database in one YAML file. It is safe for concurrent use
// in one process; writes across processes (plugin and CLI) are serialised
// by an flock on "<path>.lock" and each write re-reads the file first, so
// none is lost. Readers pick up other processes' writes by re-reading the
// file when its size or mtime changed.
type Store struct {
	path   string
	params Params

	mu    sync.Mutex
	users []record
	stamp fileStamp

	dummyOnce sync.Once
	dummy     string
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ok    bool
}

// Open loads the user file at path. A missing file is an empty store; the
// file is created on the first write.
func Open(path string) (*Store, error) {
	s := &Store{path: path, params: DefaultParams}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// Path is the file the store reads and writes.
func (s *Store) Path() string { return s.path }

// load reads the file into s.users. Caller holds s.mu.
func (s *Store) load() error {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		s.users, s.stamp = nil, fileStamp{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("users: read %s: %w", s.path, err)
	}
	st, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("users: stat %s: %w", s.path, err)
	}
	var f fileFormat
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // empty file: no users
		return fmt.Errorf("users: parse %s: %w", s.path, err)
	}
	seen := map[string]bool{}
	for i, r := range f.Users {
		if !ValidName(r.Name) || !ValidRole(r.Role) || seen[r.Name] {
			return fmt.Errorf("users: %s: entry %d: invalid or duplicate name/role", s.path, i+1)
		}
		seen[r.Name] = true
	}
	s.users = f.Users
	s.stamp = fileStamp{size: st.Size(), mtime: st.ModTime(), ok: true}
	return nil
}

// refresh re-reads the file when another process changed it. Caller holds s.mu.
func (s *Store) refresh() error {
	st, err := os.Stat(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if s.stamp.ok {
			s.users, s.stamp = nil, fileStamp{}
		}
		return nil
	case err != nil:
		return fmt.Errorf("users: stat %s: %w", s.path, err)
	}
	if s.stamp.ok && st.Size() == s.stamp.size && st.ModTime().Equal(s.stamp.mtime) {
		return nil
	}
	return s.load()
}

// mutate runs fn on a fresh copy of the users under both locks and writes
// the result atomically.
func (s *Store) mutate(fn func(users []record) ([]record, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lockFile()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.load(); err != nil {
		return err
	}
	next, err := fn(slices.Clone(s.users))
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(fileFormat{Users: next})
	if err != nil {
		return fmt.Errorf("users: encode: %w", err)
	}
	if err := atomicfile.Write(s.path, out, 0o600); err != nil {
		return err
	}
	return s.load()
}

func (s *Store) lockFile() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o750); err != nil {
		return nil, fmt.Errorf("users: create dir: %w", err)
	}
	f, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("users: open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("users: lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func checkPassword(password string) error {
	if len([]rune(password)) < MinPasswordLen {
		return ErrWeakPassword
	}
	if len(password) > maxPasswordLen {
		return ErrLongPassword
	}
	return nil
}

// Add creates a user. The password must be at least MinPasswordLen characters.
func (s *Store) Add(name, password, role string) error {
	return s.add(name, password, role, false)
}

var errNotEmpty = errors.New("store not empty")

func (s *Store) add(name, password, role string, mustChange bool) error {
	return s.mutateAdd(name, password, role, mustChange, false)
}

// mutateAdd adds a user; onlyIfEmpty makes it fail with errNotEmpty when any
// user exists (checked under the file lock, so two first starts create one
// admin).
func (s *Store) mutateAdd(name, password, role string, mustChange, onlyIfEmpty bool) error {
	if !ValidName(name) {
		return ErrInvalidName
	}
	if !ValidRole(role) {
		return ErrInvalidRole
	}
	if err := checkPassword(password); err != nil {
		return err
	}
	// Hash outside the locks: it is the slow part.
	h, err := HashPassword([]byte(password), s.params)
	if err != nil {
		return err
	}
	return s.mutate(func(us []record) ([]record, error) {
		if onlyIfEmpty && len(us) > 0 {
			return nil, errNotEmpty
		}
		if slices.ContainsFunc(us, func(r record) bool { return r.Name == name }) {
			return nil, fmt.Errorf("add %q: %w", name, ErrExists)
		}
		return append(us, record{Name: name, Role: role, Hash: h, MustChange: mustChange, Updated: time.Now().UTC()}), nil
	})
}

// SetPassword replaces a user's password; mustChange forces a change at the
// next login.
func (s *Store) SetPassword(name, password string, mustChange bool) error {
	if !ValidName(name) {
		return ErrInvalidName
	}
	if err := checkPassword(password); err != nil {
		return err
	}
	h, err := HashPassword([]byte(password), s.params)
	if err != nil {
		return err
	}
	return s.mutate(func(us []record) ([]record, error) {
		i := slices.IndexFunc(us, func(r record) bool { return r.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("set password of %q: %w", name, ErrNotFound)
		}
		us[i].Hash, us[i].MustChange, us[i].Updated = h, mustChange, time.Now().UTC()
		return us, nil
	})
}

// SetHash creates user name with role, or updates it, with an already
// hashed password (an unattended set-up hands one over, never the
// password); no forced change at the next login.
func (s *Store) SetHash(name, role, hash string) error {
	if !ValidName(name) {
		return ErrInvalidName
	}
	if !ValidRole(role) {
		return ErrInvalidRole
	}
	if err := CheckHash(hash); err != nil {
		return err
	}
	return s.mutate(func(us []record) ([]record, error) {
		now := time.Now().UTC()
		if i := slices.IndexFunc(us, func(r record) bool { return r.Name == name }); i >= 0 {
			us[i].Role, us[i].Hash, us[i].MustChange, us[i].Updated = role, hash, false, now
			return us, nil
		}
		return append(us, record{Name: name, Role: role, Hash: hash, Updated: now}), nil
	})
}

// Delete removes a user. The last admin cannot be deleted.
func (s *Store) Delete(name string) error {
	return s.mutate(func(us []record) ([]record, error) {
		i := slices.IndexFunc(us, func(r record) bool { return r.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("delete %q: %w", name, ErrNotFound)
		}
		if us[i].Role == RoleAdmin {
			admins := 0
			for _, r := range us {
				if r.Role == RoleAdmin {
					admins++
				}
			}
			if admins == 1 {
				return nil, ErrLastAdmin
			}
		}
		return slices.Delete(us, i, i+1), nil
	})
}

// List returns the users sorted by name, without hashes. A read error of a
// file changed by another process keeps the last good copy.
func (s *Store) List() []User {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.refresh()
	out := make([]User, 0, len(s.users))
	for _, r := range s.users {
		out = append(out, User{Name: r.Name, Role: r.Role, MustChangePassword: r.MustChange})
	}
	slices.SortFunc(out, func(a, b User) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Verify checks a password. An unknown user costs the same argon2 work as a
// known one (against a dummy hash), so timing does not reveal which names
// exist.
func (s *Store) Verify(name string, password []byte) (User, bool) {
	s.mu.Lock()
	_ = s.refresh()
	var rec record
	found := false
	if i := slices.IndexFunc(s.users, func(r record) bool { return r.Name == name }); i >= 0 {
		rec, found = s.users[i], true
	}
	s.mu.Unlock()

	if len(password) > maxPasswordLen {
		// Still pay for a hash so the refusal is not faster.
		VerifyPassword(nil, s.dummyHash())
		return User{}, false
	}
	if !found {
		VerifyPassword(password, s.dummyHash())
		return User{}, false
	}
	if !VerifyPassword(password, rec.Hash) {
		return User{}, false
	}
	return User{Name: rec.Name, Role: rec.Role, MustChangePassword: rec.MustChange}, true
}

// dummyHash is a hash of a random password with the store's parameters,
// made once.
func (s *Store) dummyHash() string {
	s.dummyOnce.Do(func() {
		pw := make([]byte, 32)
		h, err := HashPassword(pw, s.params)
		if err != nil {
			// rand failing is fatal elsewhere too; a fixed salt still costs the same.
			h = fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
				s.params.Memory, s.params.Time, s.params.Threads)
		}
		s.dummy = h
	})
	return s.dummy
}
