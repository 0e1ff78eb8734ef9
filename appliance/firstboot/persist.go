package firstboot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	var herr error
	if h := f.AdminPasswordHash; h != "" {
		if o.Admin == nil {
			herr = errors.New("adminPasswordHash: no auth plugin here takes a password hash")
		} else if err := o.Admin.Check(h); err != nil {
			herr = fmt.Errorf("adminPasswordHash: %w", err)
		}
	}
	if err := errors.Join(perr, err, herr); err != nil {
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
	// The embedded defaults set both (config.default.yaml).
	usersFile, pwFile := cfg.AuthLocalFiles()
	p.usersFile, p.pwFile = o.hostPath(usersFile), o.hostPath(pwFile)
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
		if err := o.Admin.Set(p.usersFile, f.AdminPasswordHash); err != nil {
			return done, fmt.Errorf("admin password hash: %w", err)
		}
		// A one-time password made before (a box set up again) is void now.
		if _, err := removeFile(p.pwFile); err != nil {
			return done, fmt.Errorf("stale one-time password file: %w", err)
		}
		done = append(done, p.usersFile+" (admin)")
	}
	return done, nil
}
