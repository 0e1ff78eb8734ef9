// Package firstboot applies tabcast-firstboot.yaml, an optional file on the
// ESP for unattended set-up (hostname, static IP, NTP, admin password hash,
// SSH keys, appliance config), and re-applies what it set on every boot.
//
// A/B updates replace the whole root file system, so the file's settings
// are persisted on the data partition (the state dir, /etc/tabcast) and
// written again into the root's /etc at each boot. The file is read once:
// applied and deleted, or renamed to .rejected when anything in it is
// wrong, in which case nothing of it is applied.
package firstboot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// FileName is the set-up file looked for at the top of the ESP.
const FileName = "tabcast-firstboot.yaml"

// RejectedSuffix is appended to a file that was refused.
const RejectedSuffix = ".rejected"

// ErrRejected marks an Apply error caused by the file's content: the file
// was renamed and nothing of it applied.
var ErrRejected = errors.New(FileName + " rejected")

// Hooks are the live side effects on the running system. A nil hook is
// skipped, so tests (and --root other than /) touch only files.
type Hooks struct {
	// SetHostname sets the kernel host name for the current boot.
	SetHostname func(name string) error
	// StartSSH starts sshd without waiting for it (the unit is ordered
	// before ssh.service, so a blocking start would deadlock).
	StartSSH func() error
}

// Options say where the files are.
type Options struct {
	ESP   string // where FileName is looked for (/efi)
	State string // persistent settings on the data partition (/var/lib/tabcast/etc = /etc/tabcast)
	Root  string // the root file system the settings are applied to (/)
	// Defaults is the appliance's embedded config.default.yaml: the config
	// section is validated with the appliance's own loader.
	Defaults []byte
	Hooks    Hooks
	// Admin takes adminPasswordHash: the auth plugin owns its users file
	// and hash format (the tabcast command runs `auth-local users`).
	Admin AdminHash
	Log   io.Writer // progress lines; nil discards
}

// AdminHash checks and sets the admin user's password hash.
type AdminHash interface {
	// Check reports whether hash is one the auth plugin accepts; the error
	// never quotes it.
	Check(hash string) error
	// Set makes the user admin (role admin) with hash in usersFile, with
	// no forced change.
	Set(usersFile, hash string) error
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "tabcast firstboot: "+format+"\n", args...)
	}
}

// Result says what Apply did.
type Result struct {
	Found   bool     // the ESP held the file
	Applied bool     // it was valid, persisted and deleted
	Persist []string // state files written from it
	Reapply []string // root files written or removed by the re-apply
}

// Apply reads the set-up file when the ESP holds one (validates all of it,
// persists it, deletes it), then re-applies the persisted settings to the
// root. A rejected file still lets the re-apply run; the returned error
// then wraps ErrRejected. Error messages never contain the password hash
// or key material.
func Apply(o Options) (Result, error) {
	var res Result
	var errs []error
	path := filepath.Join(o.ESP, FileName)
	data, err := readSmall(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case errors.Is(err, errTooLarge):
		res.Found = true
		errs = append(errs, reject(o, path, err.Error()))
	case err != nil:
		errs = append(errs, fmt.Errorf("read %s: %w", path, err))
	default:
		res.Found = true
		persisted, err := consume(o, path, data)
		res.Persist = persisted
		if err != nil {
			errs = append(errs, err)
		} else {
			res.Applied = true
		}
	}
	changed, err := Reapply(o)
	res.Reapply = changed
	if err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// consume validates, persists and deletes the file at path.
func consume(o Options, path string, data []byte) ([]string, error) {
	plan, err := prepare(o, data)
	if err != nil {
		return nil, reject(o, path, redact(err.Error(), secretsOf(data)))
	}
	written, err := plan.persist(o)
	if err != nil {
		// Left in place: the next boot tries again (persisting is idempotent).
		return written, fmt.Errorf("persist %s: %s", FileName, redact(err.Error(), secretsOf(data)))
	}
	if err := os.Remove(path); err != nil {
		return written, fmt.Errorf("delete %s after applying it: %w", path, err)
	}
	syncDir(o.ESP)
	o.logf("applied and deleted %s (%s)", path, strings.Join(written, ", "))
	return written, nil
}

// reject renames the file at path so it is not read again, and returns
// the ErrRejected error carrying msg (already free of secrets).
func reject(o Options, path, msg string) error {
	if err := os.Rename(path, path+RejectedSuffix); err != nil {
		msg += fmt.Sprintf(" (and renaming it to %s failed: %v)", FileName+RejectedSuffix, err)
	}
	syncDir(o.ESP)
	return fmt.Errorf("%w (renamed to %s; nothing of it applied):\n%s", ErrRejected, FileName+RejectedSuffix, msg)
}

var errTooLarge = errors.New("the file is larger than 1 MiB")

// readSmall reads a file of at most 1 MiB.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const max = 1 << 20
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, errTooLarge
	}
	return b, nil
}
