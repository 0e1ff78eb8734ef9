package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tabcast/tabcast/plugins/atomicfile"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Token errors; the API maps both to 401 without saying which.
var (
	ErrTokenInvalid = errors.New("access: invalid token")
	ErrTokenExpired = errors.New("access: token expired")
)

// maxTokens bounds the token file.
const maxTokens = 1000

// tokenPrefix marks Tabcast API tokens (secret scanners can match it).
const tokenPrefix = "tct_"

// TokenInfo describes an API token. The secret is shown once at creation
// and only its SHA-256 is kept.
type TokenInfo struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	User    string    `json:"user"`
	Role    Role      `json:"role"`
	Scopes  []string  `json:"scopes"`
	Created time.Time `json:"created"`
	// Expires is zero for a token that does not expire.
	Expires time.Time `json:"expires,omitzero"`
	Hash    string    `json:"hash,omitempty"`
}

// Tokens are the API tokens, kept in a 0600 JSON file. The running
// appliance and `tabcast tokens` share the file: writers hold an flock on
// "<path>.lock" and re-read first; readers reload when it changed.
type Tokens struct {
	path string
	now  func() time.Time

	mu    sync.Mutex
	list  []TokenInfo
	stamp fileStamp // of the file list was read from
}

// fileStamp tells whether a file changed since it was read. The inode is
// in it because writers replace the file by a rename: a new file whose
// size and mtime (coarse on some file systems) match the old one's is
// still noticed.
type fileStamp struct {
	ok    bool
	size  int64
	mtime time.Time
	ino   uint64
}

func (a fileStamp) same(b fileStamp) bool {
	return a.ok && b.ok && a.size == b.size && a.mtime.Equal(b.mtime) && a.ino == b.ino
}

func stampOf(st os.FileInfo) fileStamp {
	fs := fileStamp{ok: true, size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.ino = sys.Ino
	}
	return fs
}

// OpenTokens loads the token file; a missing file is an empty set.
func OpenTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path, now: time.Now}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.loadLocked(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokens) loadLocked() error {
	st, err := os.Stat(t.path)
	if errors.Is(err, os.ErrNotExist) {
		t.list, t.stamp = nil, fileStamp{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read tokens: %w", err)
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("read tokens: %w", err)
	}
	var list []TokenInfo
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("tokens file %s: %w", t.path, err)
	}
	t.list, t.stamp = list, stampOf(st)
	return nil
}

// refreshLocked reloads the file when another process changed it and
// reports whether the tokens may have changed. A file that became
// unreadable keeps the tokens last read.
func (t *Tokens) refreshLocked() bool {
	st, err := os.Stat(t.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && t.stamp.ok {
			t.list, t.stamp = nil, fileStamp{}
			return true
		}
		return false
	}
	if t.stamp.same(stampOf(st)) {
		return false
	}
	return t.loadLocked() == nil
}

// Refresh re-reads the file if another process (`tabcast tokens`) changed
// it, and reports whether it did.
func (t *Tokens) Refresh() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refreshLocked()
}

// lookup returns the token of id as last read (no reload: the guard
// refreshes once per round), or why it no longer holds.
func (t *Tokens) lookup(id string) (TokenInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, info := range t.list {
		if info.ID != id {
			continue
		}
		if !info.Expires.IsZero() && !t.now().Before(info.Expires) {
			return TokenInfo{}, ErrTokenExpired
		}
		info.Scopes = slices.Clone(info.Scopes)
		return info, nil
	}
	return TokenInfo{}, ErrTokenInvalid
}

// mutateLocked applies fn to a fresh copy under the file lock and saves.
func (t *Tokens) mutateLocked(fn func([]TokenInfo) ([]TokenInfo, error)) error {
	if err := os.MkdirAll(filepath.Dir(t.path), 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(t.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("tokens: lock: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("tokens: lock: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	if err := t.loadLocked(); err != nil {
		return err
	}
	next, err := fn(slices.Clone(t.list))
	if err != nil {
		return err
	}
	if err := t.saveLocked(next); err != nil {
		return err
	}
	return t.loadLocked()
}

// Create makes a token for user with role and scopes; ttl 0 never expires.
// It returns the secret, which is not stored.
func (t *Tokens) Create(name, user string, role Role, scopes []string, ttl time.Duration) (string, TokenInfo, error) {
	if name == "" || len(name) > 64 || user == "" {
		return "", TokenInfo{}, errors.New("a token needs a name (1..64 characters) and a user")
	}
	if _, ok := ParseRole(string(role)); !ok {
		return "", TokenInfo{}, fmt.Errorf("unknown role %q", role)
	}
	if len(scopes) == 0 {
		return "", TokenInfo{}, errors.New("a token needs at least one scope")
	}
	for _, s := range scopes {
		if !slices.Contains(AllScopes, s) {
			return "", TokenInfo{}, fmt.Errorf("unknown scope %q: want %s", s, strings.Join(AllScopes, ", "))
		}
		if s == ScopeAdmin && role != RoleAdmin {
			return "", TokenInfo{}, errors.New("scope admin needs role admin")
		}
		if s == ScopeCDP && role == RoleViewer {
			return "", TokenInfo{}, errors.New("scope cdp needs role operator or admin")
		}
	}
	id := hex.EncodeToString(randomBytes(6))
	secret := tokenPrefix + id + "_" + b64(randomBytes(32))
	info := TokenInfo{ID: id, Name: name, User: user, Role: role, Scopes: slices.Clone(scopes), Created: t.now().UTC().Truncate(time.Second)}
	if ttl > 0 {
		info.Expires = info.Created.Add(ttl)
	}
	info.Hash = hashToken(secret)
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.mutateLocked(func(list []TokenInfo) ([]TokenInfo, error) {
		list = t.prune(list)
		if len(list) >= maxTokens {
			return nil, fmt.Errorf("too many tokens (%d): revoke some first", maxTokens)
		}
		return append(list, info), nil
	})
	if err != nil {
		return "", TokenInfo{}, err
	}
	info.Hash = ""
	return secret, info, nil
}

// Verify returns the principal of a token secret.
func (t *Tokens) Verify(secret string) (Principal, error) {
	rest, ok := strings.CutPrefix(secret, tokenPrefix)
	if !ok {
		return Principal{}, ErrTokenInvalid
	}
	id, _, ok := strings.Cut(rest, "_")
	if !ok {
		return Principal{}, ErrTokenInvalid
	}
	h := hashToken(secret)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refreshLocked()
	for _, info := range t.list {
		if info.ID != id {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(info.Hash), []byte(h)) != 1 {
			return Principal{}, ErrTokenInvalid
		}
		if !info.Expires.IsZero() && !t.now().Before(info.Expires) {
			return Principal{}, ErrTokenExpired
		}
		return Principal{User: info.User, Role: info.Role, Method: MethodToken, TokenID: info.ID, Scopes: slices.Clone(info.Scopes)}, nil
	}
	return Principal{}, ErrTokenInvalid
}

// List returns every token without its hash.
func (t *Tokens) List() []TokenInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refreshLocked()
	out := make([]TokenInfo, 0, len(t.list))
	for _, info := range t.list {
		info.Hash = ""
		info.Scopes = slices.Clone(info.Scopes)
		out = append(out, info)
	}
	return out
}

// Revoke deletes a token; ok is false when there was none with that id.
func (t *Tokens) Revoke(id string) (TokenInfo, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var info TokenInfo
	found := false
	err := t.mutateLocked(func(list []TokenInfo) ([]TokenInfo, error) {
		i := slices.IndexFunc(list, func(x TokenInfo) bool { return x.ID == id })
		if i < 0 {
			return list, nil
		}
		info, found = list[i], true
		return slices.Delete(list, i, i+1), nil
	})
	if err != nil || !found {
		return TokenInfo{}, false, err
	}
	info.Hash = ""
	return info, true, nil
}

// EnsureFile makes sure file (mode 0600) holds a valid token; when it does
// not, it creates one for user with role, the scopes read and control, and
// writes it there. It is how the agent CLI on the box finds its token.
func (t *Tokens) EnsureFile(file, name, user string, role Role) (created bool, err error) {
	if b, err := os.ReadFile(file); err == nil {
		if _, err := t.Verify(strings.TrimSpace(string(b))); err == nil {
			return false, nil
		}
	}
	secret, _, err := t.Create(name, user, role, []string{ScopeRead, ScopeControl}, 0)
	if err != nil {
		return false, err
	}
	if err := atomicfile.Write(file, []byte(secret+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("write token file: %w", err)
	}
	return true, nil
}

// prune drops tokens that expired more than a day ago.
func (t *Tokens) prune(list []TokenInfo) []TokenInfo {
	cut := t.now().Add(-24 * time.Hour)
	return slices.DeleteFunc(list, func(info TokenInfo) bool {
		return !info.Expires.IsZero() && info.Expires.Before(cut)
	})
}

func (t *Tokens) saveLocked(list []TokenInfo) error {
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(t.path, b, 0o600); err != nil {
		return fmt.Errorf("save tokens: %w", err)
	}
	return nil
}

func hashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}
