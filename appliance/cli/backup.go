package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/appliance/update"
)

const backupUsage = `usage: tabcast backup [-o FILE] [--sign KEY] [config flags]
Writes a .tar.gz (mode 0600) of the appliance's configuration and secrets:
the config file (and every file in /etc/tabcast when that is its directory),
the users file, the one-time admin password, the API tokens, the TLS
certificate and key, the TURN secret and the agent token, with a
manifest.json (each file's role, original path, mode, owner, sha256). Files
that do not exist are skipped and listed. Browser profiles are not included.
The archive holds secrets: keep it like the appliance's disk.

  --sign KEY  also sign the backup with the update signing key KEY (tabcast
              update keygen's update-signing.key, mode 0600): manifest.sig,
              the ed25519 signature of manifest.json, which holds every
              file's sha256; tabcast restore verifies it against update.pub.
              That key installs software on every appliance trusting it:
              rather than copying it onto the box, pipe it in, e.g.
              ssh root@box tabcast backup --sign /dev/stdin -o b.tar.gz < update-signing.key
`

// backupFormat is manifest.json's version. Restore reads format 1 by role
// (the "what" of each file), so it did not need to change.
const backupFormat = 1

// Backup limits; variables for tests (a test need not write 64 MiB to show
// that more is refused).
var (
	backupMaxFile     int64 = 64 << 20
	backupMaxTotal    int64 = 256 << 20
	backupMaxManifest int64 = 1 << 20
)

// Archive members besides files/….
const (
	backupManifestName = "manifest.json"
	backupSigName      = "manifest.sig" // as in update bundles
)

// dedicatedConfigDir is backed up whole when the config file is in it (a
// --config elsewhere may sit beside unrelated files). A variable for tests.
var dedicatedConfigDir = filepath.Dir(config.DefaultFilePath)

// backupManifest is manifest.json.
type backupManifest struct {
	Version        int       `json:"version"` // backupFormat
	TabcastVersion string    `json:"tabcastVersion"`
	Created        time.Time `json:"created"`
	Host           string    `json:"host"`
	// Listen is server.listen at backup time, for the reader. Restore never
	// uses it: an archive must not choose what restore probes (it checks
	// the local configuration's server.listen).
	Listen  string          `json:"listen"`
	Files   []backupFile    `json:"files"`
	Skipped []backupSkipped `json:"skipped,omitempty"`
}

type backupFile struct {
	Path  string `json:"path"`  // original absolute path
	Entry string `json:"entry"` // name in the archive: "files" + Path
	// What is the file's role (one of the role* constants): restore finds
	// the destination by it, in the local backupSet.
	What   string `json:"what"`
	Mode   string `json:"mode"` // octal permission bits, "0600"; informative
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// The owner at backup time; informative, restore applies its rules.
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
}

type backupSkipped struct {
	Path   string `json:"path"`
	What   string `json:"what"`
	Reason string `json:"reason"`
}

func cmdBackup(args []string, stdout, stderr io.Writer) int {
	var out, signKey string
	extra := func(fs *pflag.FlagSet) {
		fs.StringVarP(&out, "output", "o", "", "backup file (default tabcast-backup-<host>-<UTC time>.tar.gz here)")
		fs.StringVar(&signKey, "sign", "", "sign with this update signing key (update-signing.key; /dev/stdin to pipe it)")
	}
	if code, ok := parseCommandFlags("backup", args, stderr, backupUsage, extra); !ok {
		return code
	}
	cfg, fs, err := loadConfig("backup", args, io.Discard, extra)
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	var key ed25519.PrivateKey
	if signKey != "" {
		// Before reading anything else: a wrong key path should not cost a
		// whole backup. LoadPrivateKey never puts key bytes in its errors.
		if key, err = update.LoadPrivateKey(signKey); err != nil {
			fmt.Fprintf(stderr, "tabcast backup: --sign: %v\n", err)
			return 1
		}
	}
	file, _ := fs.GetString(config.FlagConfig)
	now := time.Now().UTC()
	host, _ := os.Hostname()
	if out == "" {
		h := host
		if h == "" {
			h = "unknown"
		}
		out = fmt.Sprintf("tabcast-backup-%s-%s.tar.gz", safeName(h), now.Format("20060102T150405Z"))
	}
	m, err := writeBackup(out, cfg, file, host, now, key, signKey)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast backup:", err)
		return 1
	}
	for _, f := range m.Files {
		fmt.Fprintf(stdout, "  %s %s (%s)\n", f.Mode, f.Path, f.What)
	}
	for _, s := range m.Skipped {
		fmt.Fprintf(stdout, "  skipped %s (%s): %s\n", s.Path, s.What, s.Reason)
	}
	signed := "unsigned"
	if key != nil {
		signed = "signed by update key " + update.KeyID(key.Public().(ed25519.PublicKey))
	}
	fmt.Fprintf(stdout, "Wrote %s (%s): %d file(s), %d skipped. It holds secrets: store it like the appliance's disk.\n",
		out, signed, len(m.Files), len(m.Skipped))
	return 0
}

// Roles: what a backed-up file is. manifest.json records one per file
// ("what") and restore matches archive entries to this appliance's
// destinations by it, so these strings are part of the backup format:
// never change one.
const (
	roleConfig     = "config file"
	roleConfigDir  = "config directory"
	roleUsers      = "users file (auth-local)"
	roleInitialPW  = "one-time admin password (auth-local)"
	roleTokens     = "API tokens"
	roleTLSCert    = "TLS certificate"
	roleTLSKey     = "TLS key"
	roleTURNSecret = "TURN secret (turnd)"
	roleAgentToken = "agent CLI token"
	roleProxyCreds = "upstream proxy credentials"
)

// configDirPerm is the mode of the other files in the config directory: what
// they hold is not known, so they are treated as secrets.
const configDirPerm os.FileMode = 0o600

// backupTarget is one file of the backed-up set: where this appliance's
// configuration puts it, and the mode restore writes it with. The modes
// are those the appliance's own writers use (auth-local, access, certs,
// turnd: secrets 0600; firstboot: config 0640; the certificate 0644).
type backupTarget struct {
	Path string // absolute
	What string // role
	Perm os.FileMode
}

// backupSet is the one list of what backup reads and what restore may
// write, derived from the local configuration only.
type backupSet struct {
	Named []backupTarget // one per path, in backup order
	// ConfigDir is dedicatedConfigDir when the config file is in it, else
	// "": backup then takes every regular file directly in it, and restore
	// may write files directly in it (roleConfigDir).
	ConfigDir string
}

// newBackupSet lists the appliance's backed-up files from cfg (loaded from
// cfgFile, "" = the default path).
func newBackupSet(cfg *config.Config, cfgFile string) (*backupSet, error) {
	if cfgFile == "" {
		cfgFile = config.DefaultFilePath
	}
	usersFile, pwFile := cfg.AuthLocalFiles()
	turnSecret, _ := cfg.Plugins.Config["turnd"]["secretFile"].(string)
	certFile, keyFile := cfg.Server.CertFile, cfg.Server.KeyFile
	if certFile == "" {
		certFile, keyFile = filepath.Join(cfg.Server.DataDir, "tls-cert.pem"), filepath.Join(cfg.Server.DataDir, "tls-key.pem")
	}
	set := &backupSet{}
	seen := map[string]int{}
	for _, t := range []backupTarget{
		{cfgFile, roleConfig, 0o640},
		{usersFile, roleUsers, 0o600},
		{pwFile, roleInitialPW, 0o600},
		{filepath.Join(cfg.Server.DataDir, "tokens.json"), roleTokens, 0o600},
		{certFile, roleTLSCert, 0o644},
		{keyFile, roleTLSKey, 0o600},
		{turnSecret, roleTURNSecret, 0o600},
		{app.AgentTokenFile(cfg), roleAgentToken, 0o600},
		{cfg.Sessions.ProxyCredentialsFile, roleProxyCreds, 0o600},
	} {
		if t.Path == "" {
			continue
		}
		abs, err := filepath.Abs(t.Path)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", t.What, t.Path, err)
		}
		t.Path = abs
		// One entry per path; the first role wins, with the stricter mode
		// of the two (a certFile that is also the keyFile holds a key).
		if i, ok := seen[abs]; ok {
			set.Named[i].Perm &= t.Perm
			continue
		}
		seen[abs] = len(set.Named)
		set.Named = append(set.Named, t)
	}
	if filepath.Dir(set.Named[0].Path) == filepath.Clean(dedicatedConfigDir) {
		set.ConfigDir = filepath.Clean(dedicatedConfigDir)
	}
	return set, nil
}

// named returns the target whose path is path.
func (s *backupSet) named(path string) (backupTarget, bool) {
	for _, t := range s.Named {
		if t.Path == path {
			return t, true
		}
	}
	return backupTarget{}, false
}

// role returns the named target with role what.
func (s *backupSet) role(what string) (backupTarget, bool) {
	for _, t := range s.Named {
		if t.What == what {
			return t, true
		}
	}
	return backupTarget{}, false
}

// configDirName checks a file name in the config directory: one plain
// component, printable, not a temp file of atomicfile or restore. Backup
// skips what it refuses and restore refuses it, so every backup restores.
func configDirName(name string) error {
	switch {
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`):
		return errors.New("not a plain file name")
	case len(name) > 200:
		return errors.New("name longer than 200 bytes")
	case strings.Contains(name, ".tmp-"):
		return errors.New("a temporary file")
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return errors.New("name has control or invalid characters")
		}
	}
	return nil
}

// sources lists the files a backup reads now, in order: the named ones and
// the config directory's other regular files.
func (s *backupSet) sources() ([]backupTarget, []backupSkipped, error) {
	out := []backupTarget{s.Named[0]}
	var skipped []backupSkipped
	if s.ConfigDir != "" {
		ents, err := os.ReadDir(s.ConfigDir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("read %s: %w", s.ConfigDir, err)
		}
		for _, e := range ents {
			path := filepath.Join(s.ConfigDir, e.Name())
			if _, ok := s.named(path); ok || !e.Type().IsRegular() {
				continue // a named role's file, or a directory (ssh/, system/)
			}
			if err := configDirName(e.Name()); err != nil {
				if !strings.Contains(e.Name(), ".tmp-") {
					skipped = append(skipped, backupSkipped{Path: path, What: roleConfigDir, Reason: err.Error()})
				}
				continue
			}
			out = append(out, backupTarget{Path: path, What: roleConfigDir, Perm: configDirPerm})
		}
	}
	return append(out, s.Named[1:]...), skipped, nil
}

// writeBackup reads the files and writes the archive to out, signed with
// key when it is not nil (keyPath: its file, never backed up).
func writeBackup(out string, cfg *config.Config, cfgFile, host string, now time.Time, key ed25519.PrivateKey, keyPath string) (*backupManifest, error) {
	set, err := newBackupSet(cfg, cfgFile)
	if err != nil {
		return nil, err
	}
	srcs, skipped, err := set.sources()
	if err != nil {
		return nil, err
	}
	keyAbs := ""
	if keyPath != "" {
		keyAbs, _ = filepath.Abs(keyPath)
	}
	m := &backupManifest{Version: backupFormat, TabcastVersion: version, Created: now, Host: host, Listen: cfg.Server.Listen, Skipped: skipped}
	var entries []tarEntry
	for _, s := range srcs {
		if s.Path == keyAbs {
			// Kept in /etc/tabcast, it would otherwise travel in every
			// backup, next to the secrets it is meant to vouch for.
			m.Skipped = append(m.Skipped, backupSkipped{Path: s.Path, What: s.What, Reason: "the update signing key is never backed up"})
			continue
		}
		st, err := os.Stat(s.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			m.Skipped = append(m.Skipped, backupSkipped{Path: s.Path, What: s.What, Reason: "does not exist"})
			continue
		case err != nil:
			return nil, fmt.Errorf("%s: %w", s.What, err)
		case !st.Mode().IsRegular():
			m.Skipped = append(m.Skipped, backupSkipped{Path: s.Path, What: s.What, Reason: "not a regular file (" + st.Mode().Type().String() + ")"})
			continue
		case st.Size() > backupMaxFile:
			return nil, fmt.Errorf("%s %s: %d bytes, more than the %d a backup takes", s.What, s.Path, st.Size(), backupMaxFile)
		}
		data, err := os.ReadFile(s.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (run as root or the tabcast user)", s.What, err)
		}
		sum := sha256.Sum256(data)
		f := backupFile{
			Path: s.Path, Entry: "files" + s.Path, What: s.What,
			Mode: fmt.Sprintf("%04o", st.Mode().Perm()), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			UID: -1, GID: -1,
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			f.UID, f.GID = int(sys.Uid), int(sys.Gid)
			if u, err := user.LookupId(strconv.Itoa(f.UID)); err == nil {
				f.User = u.Username
			}
			if g, err := user.LookupGroupId(strconv.Itoa(f.GID)); err == nil {
				f.Group = g.Name
			}
		}
		m.Files = append(m.Files, f)
		entries = append(entries, tarEntry{name: f.Entry, mode: int64(st.Mode().Perm()), data: data})
	}
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	mj = append(mj, '\n')
	head := []tarEntry{{name: backupManifestName, mode: 0o600, data: mj}}
	if key != nil {
		// The manifest holds every file's sha256 and restore refuses any
		// entry it does not list, so signing it signs the whole backup.
		head = append(head, tarEntry{name: backupSigName, mode: 0o600, data: update.SignManifest(key, mj)})
	}
	if err := writeTarGz(out, append(head, entries...), now); err != nil {
		return nil, err
	}
	return m, nil
}

// Restore's checks for a running appliance; variables for tests.
var (
	// serviceActive reports whether systemd runs tabcast.service.
	serviceActive = func() bool {
		if _, err := exec.LookPath("systemctl"); err != nil {
			return false
		}
		_, err := runCommand(context.Background(), 5*time.Second, "systemctl", "is-active", "--quiet", "tabcast.service")
		return err == nil
	}
	healthTimeout = 2 * time.Second
)

// healthAnswers reports the /healthz URL at listen that answers, if any.
func healthAnswers(listen string) (string, bool) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "0" {
		return "", false
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	addr := net.JoinHostPort(host, port)
	// Only a liveness probe: no credentials are sent, the certificate may
	// be self-signed.
	client := &http.Client{Timeout: healthTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // liveness probe only
		Proxy:           nil,
	}}
	defer client.CloseIdleConnections()
	for _, scheme := range []string{"https", "http"} {
		u := scheme + "://" + addr + "/healthz"
		resp, err := client.Get(u)
		if err == nil {
			resp.Body.Close()
			return u, true
		}
	}
	return "", false
}
