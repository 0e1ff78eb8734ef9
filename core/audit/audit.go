// Package audit writes the appliance's audit trail: who logged in, opened,
// watched or closed a session, and who created or revoked a token. One JSON
// object per line. Records never hold passwords, tokens, typed text or URL
// queries; session ids are hashed so the trail cannot be used to attach.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Outcomes of a record.
const (
	OK     = "ok"
	Denied = "denied"
	Failed = "failed"
)

// Record is one audit event.
type Record struct {
	Time    time.Time `json:"time"`
	Action  string    `json:"action"` // login, logout, session.create, ...
	User    string    `json:"user,omitempty"`
	Session string    `json:"session,omitempty"` // HashSession of the id
	Outcome string    `json:"outcome"`
	Code    string    `json:"code,omitempty"` // the stable error code of a refusal
	Source  string    `json:"source,omitempty"`
	// Detail is a safe summary: a role, a token id, a viewer name.
	Detail string `json:"detail,omitempty"`
}

// HashSession is the audit form of a session id.
func HashSession(id string) string {
	if id == "" {
		return ""
	}
	h := sha256.Sum256([]byte("tabcast-session:" + id))
	return hex.EncodeToString(h[:8])
}

// Log appends records to a file, rotating it to path.1 at maxBytes so the
// trail stays bounded on a small disk. Memory keeps the newest records for
// the admin page.
type Log struct {
	path     string
	maxBytes int64

	mu     sync.Mutex
	f      *os.File
	size   int64
	recent []Record // ring of the newest, for Recent
	next   int
	w      io.Writer // tests; nil means f
}

// recentMax is how many records Recent can return.
const recentMax = 500

// Open opens (creating, mode 0600) the audit file at path.
func Open(path string, maxBytes int64) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	return &Log{path: path, maxBytes: maxBytes, f: f, size: st.Size()}, nil
}

// Discard is a Log that keeps records only in memory.
func Discard() *Log { return &Log{w: io.Discard} }

// Add writes r (Time defaults to now). A failing disk does not stop the
// appliance: the error is returned for the caller to log.
func (l *Log) Add(r Record) error {
	if l == nil {
		return nil
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recent) < recentMax {
		l.recent = append(l.recent, r)
	} else {
		l.recent[l.next] = r
	}
	l.next = (l.next + 1) % recentMax
	if l.w != nil {
		_, err = l.w.Write(b)
		return err
	}
	if l.f == nil {
		return nil
	}
	if l.maxBytes > 0 && l.size+int64(len(b)) > l.maxBytes {
		if err := l.rotateLocked(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	return err
}

func (l *Log) rotateLocked() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		l.f = nil
		return err
	}
	l.f, l.size = f, 0
	return nil
}

// Recent returns up to n of the newest records, newest first.
func (l *Log) Recent(n int) []Record {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > len(l.recent) {
		n = len(l.recent)
	}
	out := make([]Record, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, l.recent[(l.next-i+len(l.recent))%len(l.recent)])
	}
	return out
}

// Close closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
