package firstboot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tabcast/tabcast/appliance/config"
	"go.yaml.in/yaml/v3"
)

// Where the persisted settings live, relative to the state dir.
const (
	systemDir       = "system"
	sshDir          = "ssh"
	hostnameFile    = "system/hostname"
	networkFile     = "system/network.yaml"
	ntpFile         = "system/ntp"
	authorizedKeys  = "ssh/authorized_keys"
	stateConfigFile = "config.yaml"
	etcTabcast      = "/etc/tabcast" // = the state dir on the appliance
)

// plan is a validated file, ready to persist.
type plan struct {
	f         *File
	config    []byte // merged config.yaml; nil: no config section
	usersFile string // auth-local's users file (path on this system)
	pwFile    string // auth-local's one-time password file
}

// prepare parses and validates everything, including the config section
// merged into the current config.yaml and checked by the appliance's own
// loader. It writes nothing.
func prepare(o Options, data []byte) (*plan, error) {
	f, perr := Parse(data)
	if f == nil {
		return nil, perr
	}
	p, err := f.plan(o)
	if err := errors.Join(perr, err); err != nil {
		return nil, err
	}
	return p, nil
}

// plan checks the config section and finds auth-local's files.
func (f *File) plan(o Options) (*plan, error) {
	p := &plan{f: f}
	hasConfig := f.Config.Kind == yaml.MappingNode
	if !hasConfig && f.AdminPasswordHash == "" {
		return p, nil
	}
	cfgPath := filepath.Join(o.State, stateConfigFile)
	current, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", cfgPath, err)
	}
	merged := current
	if hasConfig {
		if merged, err = mergeConfig(current, &f.Config); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		p.config = merged
	}
	cfg, err := loadConfig(o.Defaults, merged)
	if err != nil {
		return nil, err
	}
	var ac struct {
		UsersFile           string `json:"usersFile"`
		InitialPasswordFile string `json:"initialPasswordFile"`
	}
	if b, err := cfg.PluginConfigJSON("auth-local"); err == nil {
		_ = json.Unmarshal(b, &ac)
	}
	if ac.UsersFile == "" {
		ac.UsersFile = etcTabcast + "/users.yaml"
	}
	if ac.InitialPasswordFile == "" {
		ac.InitialPasswordFile = etcTabcast + "/initial-admin-password"
	}
	p.usersFile, p.pwFile = o.hostPath(ac.UsersFile), o.hostPath(ac.InitialPasswordFile)
	return p, nil
}

// loadConfig validates a config.yaml with the appliance's loader (defaults
// + this file; no environment or flags, which are not the file's).
func loadConfig(defaults, file []byte) (*config.Config, error) {
	dir, err := os.MkdirTemp("", "tabcast-firstboot-")
	if err != nil {
		return nil, fmt.Errorf("config check: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		return nil, fmt.Errorf("config check: %w", err)
	}
	cfg, err := config.Load(config.Options{Defaults: defaults, File: path})
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), path, "config.yaml with tabcast-firstboot.yaml's config")
		return nil, errors.New(msg)
	}
	return cfg, nil
}

// hostPath maps an appliance path to this system: /etc/tabcast/... is the
// state dir, anything else is under the root.
func (o Options) hostPath(p string) string {
	if rel, ok := strings.CutPrefix(p, etcTabcast+"/"); ok {
		return filepath.Join(o.State, rel)
	}
	return filepath.Join(o.Root, p)
}

// persist writes the plan into the state dir, each file atomically and
// fsynced. It returns the state-relative paths it wrote or removed.
func (p *plan) persist(o Options) ([]string, error) {
	var done []string
	put := func(rel string, data []byte, perm os.FileMode, own *owner) error {
		if _, err := writeFile(filepath.Join(o.State, rel), data, perm, own); err != nil {
			return err
		}
		done = append(done, rel)
		return nil
	}
	del := func(rel string) error {
		if _, err := removeFile(filepath.Join(o.State, rel)); err != nil {
			return err
		}
		done = append(done, rel+" (removed)")
		return nil
	}
	f := p.f
	if f.Hostname != "" || f.Network != nil || f.NTP != nil {
		if err := trustedDir(filepath.Join(o.State, systemDir)); err != nil {
			return done, err
		}
	}
	if f.Hostname != "" {
		if err := put(hostnameFile, []byte(f.Hostname+"\n"), 0o600, nil); err != nil {
			return done, err
		}
	}
	if n := f.Network; n != nil {
		if n.DHCP {
			if err := del(networkFile); err != nil {
				return done, err
			}
		} else {
			b, err := yaml.Marshal(n)
			if err != nil {
				return done, fmt.Errorf("encode network: %w", err)
			}
			if err := put(networkFile, b, 0o600, nil); err != nil {
				return done, err
			}
		}
	}
	if f.NTP != nil {
		if len(*f.NTP) == 0 {
			if err := del(ntpFile); err != nil {
				return done, err
			}
		} else if err := put(ntpFile, []byte(strings.Join(*f.NTP, "\n")+"\n"), 0o600, nil); err != nil {
			return done, err
		}
	}
	if f.SSH != nil {
		if err := trustedDir(filepath.Join(o.State, sshDir)); err != nil {
			return done, err
		}
		if len(f.SSH.AuthorizedKeys) == 0 {
			if err := del(authorizedKeys); err != nil {
				return done, err
			}
		} else if err := put(authorizedKeys, []byte(strings.Join(f.SSH.AuthorizedKeys, "\n")+"\n"), 0o600, nil); err != nil {
			return done, err
		}
	}
	if p.config != nil {
		path := filepath.Join(o.State, stateConfigFile)
		perm := os.FileMode(0o640)
		if st, err := os.Stat(path); err == nil {
			perm = st.Mode().Perm()
		}
		// tabcast reads (and owns) its config.
		if err := put(stateConfigFile, p.config, perm, ownerOf(o.State)); err != nil {
			return done, err
		}
	}
	if f.AdminPasswordHash != "" {
		if err := setAdminHash(p.usersFile, p.pwFile, f.AdminPasswordHash); err != nil {
			return done, err
		}
		done = append(done, p.usersFile+" (admin)")
	}
	return done, nil
}

// userRecord and usersDoc are auth-local's users file format
// (auth-local/users/store.go, read there with unknown fields refused).
type userRecord struct {
	Name       string    `yaml:"name"`
	Role       string    `yaml:"role"`
	Hash       string    `yaml:"hash"`
	MustChange bool      `yaml:"must_change,omitempty"`
	Updated    time.Time `yaml:"updated"`
}

type usersDoc struct {
	Users []userRecord `yaml:"users"`
}

// setAdminHash makes the user admin (role admin) with the given hash, no
// forced change. With a user present, auth-local's first start creates no
// admin of its own, so no one-time password is generated or shown; a
// one-time password file of an earlier start is removed, as it no longer
// logs in. The write holds auth-local's lock (flock on <file>.lock).
func setAdminHash(path, pwFile, hash string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("users file: %w", err)
	}
	own := ownerOf(dir) // auth-local runs as tabcast: it must keep opening both files
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("users file lock: %w", err)
	}
	defer lock.Close()
	if own != nil {
		if err := lock.Chown(own.uid, own.gid); err != nil {
			return fmt.Errorf("users file lock: %w", err)
		}
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("users file lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too

	var doc usersDoc
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read users file %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("parse users file %s: %w", path, err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	found := false
	for i := range doc.Users {
		if doc.Users[i].Name == "admin" {
			doc.Users[i].Role, doc.Users[i].Hash, doc.Users[i].MustChange, doc.Users[i].Updated = "admin", hash, false, now
			found = true
		}
	}
	if !found {
		doc.Users = append(doc.Users, userRecord{Name: "admin", Role: "admin", Hash: hash, Updated: now})
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode users file: %w", err)
	}
	if _, err := writeFile(path, out, 0o600, own); err != nil {
		return err
	}
	if _, err := removeFile(pwFile); err != nil {
		return fmt.Errorf("stale one-time password file: %w", err)
	}
	return nil
}
