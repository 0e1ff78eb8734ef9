package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/plugins/atomicfile"
)

const backupUsage = `usage: tabcast backup [-o FILE] [config flags]
Writes a .tar.gz (mode 0600) of the appliance's configuration and secrets:
the config file (and every file in /etc/tabcast when that is its directory),
the users file, the one-time admin password, the API tokens, the TLS
certificate and key, the TURN secret and the agent token, with a
manifest.json (original path, mode, owner, sha256 of each). Files that do
not exist are skipped and listed. Browser profiles are not included. The
archive holds secrets: keep it like the appliance's disk.
`

const restoreUsage = `usage: tabcast restore FILE [--dry-run] [--force]
Restores a tabcast backup to the paths it was taken from. Every file's
sha256 is checked against the manifest before anything is written; each
file is written atomically with its original mode (and owner, as root).
Refuses to replace existing files, or to run while tabcast is running
(tabcast.service active, or something answers on the backed-up
server.listen /healthz), unless --force. --dry-run only lists the plan.
`

// backupFormat is manifest.json's version.
const backupFormat = 1

// Backup limits.
const (
	backupMaxFile  = 64 << 20
	backupMaxTotal = 256 << 20
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
	// Listen is server.listen at backup time: restore checks that nothing
	// answers there.
	Listen  string          `json:"listen"`
	Files   []backupFile    `json:"files"`
	Skipped []backupSkipped `json:"skipped,omitempty"`
}

type backupFile struct {
	Path   string `json:"path"`  // original absolute path
	Entry  string `json:"entry"` // name in the archive
	What   string `json:"what"`
	Mode   string `json:"mode"` // octal permission bits, "0600"
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	User   string `json:"user,omitempty"`
	Group  string `json:"group,omitempty"`
}

type backupSkipped struct {
	Path   string `json:"path"`
	What   string `json:"what"`
	Reason string `json:"reason"`
}

func cmdBackup(args []string, stdout, stderr io.Writer) int {
	var out string
	extra := func(fs *pflag.FlagSet) {
		fs.StringVarP(&out, "output", "o", "", "backup file (default tabcast-backup-<host>-<UTC time>.tar.gz here)")
	}
	if code, ok := parseCommandFlags("backup", args, stderr, backupUsage, extra); !ok {
		return code
	}
	cfg, fs, err := loadConfig("backup", args, io.Discard, extra)
	if err != nil {
		printConfigError(stderr, err)
		return 1
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
	m, err := writeBackup(out, cfg, file, host, now)
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
	fmt.Fprintf(stdout, "Wrote %s: %d file(s), %d skipped. It holds secrets: store it like the appliance's disk.\n", out, len(m.Files), len(m.Skipped))
	return 0
}

// backupSource is a file a backup wants.
type backupSource struct{ Path, What string }

// backupSources lists the files a backup holds, in order, absolute.
func backupSources(cfg *config.Config, cfgFile string) ([]backupSource, error) {
	var out []backupSource
	add := func(path, what string) error {
		if path == "" {
			return nil
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		out = append(out, backupSource{Path: abs, What: what})
		return nil
	}
	if cfgFile == "" {
		cfgFile = config.DefaultFilePath
	}
	if err := add(cfgFile, "config file"); err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(cfgFile); err == nil && filepath.Dir(abs) == filepath.Clean(dedicatedConfigDir) {
		ents, err := os.ReadDir(dedicatedConfigDir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read %s: %w", dedicatedConfigDir, err)
		}
		for _, e := range ents {
			// Skip atomicfile's temp files and anything not a plain file.
			if e.Type().IsRegular() && !strings.Contains(e.Name(), ".tmp-") {
				if err := add(filepath.Join(dedicatedConfigDir, e.Name()), "config directory"); err != nil {
					return nil, err
				}
			}
		}
	}
	str := func(plugin, key string) string {
		s, _ := cfg.Plugins.Config[plugin][key].(string)
		return s
	}
	certFile, keyFile := cfg.Server.CertFile, cfg.Server.KeyFile
	if certFile == "" {
		certFile, keyFile = filepath.Join(cfg.Server.DataDir, "tls-cert.pem"), filepath.Join(cfg.Server.DataDir, "tls-key.pem")
	}
	for _, s := range []struct{ path, what string }{
		{str("auth-local", "usersFile"), "users file (auth-local)"},
		{str("auth-local", "initialPasswordFile"), "one-time admin password (auth-local)"},
		{filepath.Join(cfg.Server.DataDir, "tokens.json"), "API tokens"},
		{certFile, "TLS certificate"},
		{keyFile, "TLS key"},
		{str("turnd", "secretFile"), "TURN secret (turnd)"},
		{agentTokenFile(cfg), "agent CLI token"},
	} {
		if err := add(s.path, s.what); err != nil {
			return nil, err
		}
	}
	// One entry per path; the first description wins, except that a named
	// role beats "config directory".
	seen := map[string]int{}
	var uniq []backupSource
	for _, s := range out {
		if i, ok := seen[s.Path]; ok {
			if uniq[i].What == "config directory" {
				uniq[i].What = s.What
			}
			continue
		}
		seen[s.Path] = len(uniq)
		uniq = append(uniq, s)
	}
	return uniq, nil
}

// writeBackup reads the files and writes the archive to out.
func writeBackup(out string, cfg *config.Config, cfgFile, host string, now time.Time) (*backupManifest, error) {
	srcs, err := backupSources(cfg, cfgFile)
	if err != nil {
		return nil, err
	}
	m := &backupManifest{Version: backupFormat, TabcastVersion: version, Created: now, Host: host, Listen: cfg.Server.Listen}
	var entries []tarEntry
	for _, s := range srcs {
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
	entries = append([]tarEntry{{name: "manifest.json", mode: 0o600, data: append(mj, '\n')}}, entries...)
	if err := writeTarGz(out, entries, now); err != nil {
		return nil, err
	}
	return m, nil
}

// Running checks; variables for tests.
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

func cmdRestore(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("restore", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dryRun := fs.Bool("dry-run", false, "verify the archive and list what would be written; write nothing")
	force := fs.Bool("force", false, "replace existing files, and restore even while tabcast is running")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stderr, restoreUsage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "tabcast restore: %v\n%s", err, restoreUsage)
		return 2
	case fs.NArg() != 1:
		fmt.Fprint(stderr, restoreUsage)
		return 2
	}
	if err := restore(fs.Arg(0), *dryRun, *force, stdout); err != nil {
		fmt.Fprintln(stderr, "tabcast restore:", err)
		return 1
	}
	return 0
}

// restore verifies the archive completely, then writes its files.
func restore(archive string, dryRun, force bool, stdout io.Writer) error {
	m, data, err := readBackup(archive)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing was written", archive, err)
	}
	type plan struct {
		f      backupFile
		mode   os.FileMode
		exists bool
	}
	var plans []plan
	var existing []string
	for _, f := range m.Files {
		mode, _ := strconv.ParseUint(f.Mode, 8, 32) // checked by readBackup
		p := plan{f: f, mode: os.FileMode(mode)}
		st, err := os.Lstat(f.Path)
		switch {
		case err == nil && st.IsDir():
			return fmt.Errorf("%s is a directory; nothing was written", f.Path)
		case err == nil:
			p.exists = true
			existing = append(existing, f.Path)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s: %w; nothing was written", f.Path, err)
		}
		plans = append(plans, p)
	}
	if dryRun {
		fmt.Fprintf(stdout, "%s: tabcast %s backup of %s taken %s; every sha256 matches.\n",
			archive, m.TabcastVersion, m.Host, m.Created.Format(time.RFC3339))
		for _, p := range plans {
			state := "new"
			if p.exists {
				state = "exists, would be replaced (needs --force)"
				if force {
					state = "exists, would be replaced"
				}
			}
			fmt.Fprintf(stdout, "  would write %s %s (%s, %d bytes): %s\n", p.f.Mode, p.f.Path, p.f.What, p.f.Size, state)
		}
		for _, s := range m.Skipped {
			fmt.Fprintf(stdout, "  not in the backup: %s (%s): %s\n", s.Path, s.What, s.Reason)
		}
		return nil
	}
	if len(existing) > 0 && !force {
		return fmt.Errorf("refusing to replace existing files (use --force): %s; nothing was written", strings.Join(existing, ", "))
	}
	if !force {
		if serviceActive() {
			return errors.New("tabcast.service is active: stop it first (systemctl stop tabcast) or use --force; nothing was written")
		}
		if u, ok := healthAnswers(m.Listen); ok {
			return fmt.Errorf("an appliance answers on %s: stop it first or use --force; nothing was written", u)
		}
	}
	chown := os.Geteuid() == 0
	var written []string
	for _, p := range plans {
		if err := atomicfile.Write(p.f.Path, data[p.f.Entry], p.mode); err != nil {
			return fmt.Errorf("%w (already restored: %s)", err, listOrNone(written))
		}
		written = append(written, p.f.Path)
		owner := ""
		if chown {
			uid, gid := ownerIDs(p.f)
			if uid >= 0 || gid >= 0 {
				if err := os.Lchown(p.f.Path, uid, gid); err != nil {
					return fmt.Errorf("chown %s: %w (already restored: %s)", p.f.Path, err, listOrNone(written))
				}
				owner = fmt.Sprintf(", owner %d:%d", uid, gid)
			}
		}
		fmt.Fprintf(stdout, "  restored %s %s (%s%s)\n", p.f.Mode, p.f.Path, p.f.What, owner)
	}
	fmt.Fprintf(stdout, "Restored %d file(s) from %s.\n", len(written), archive)
	return nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// ownerIDs prefers the user and group names (ids may differ on a new
// machine), then the recorded ids.
func ownerIDs(f backupFile) (int, int) {
	uid, gid := f.UID, f.GID
	if f.User != "" {
		if u, err := user.Lookup(f.User); err == nil {
			if n, err := strconv.Atoi(u.Uid); err == nil {
				uid = n
			}
		}
	}
	if f.Group != "" {
		if g, err := user.LookupGroup(f.Group); err == nil {
			if n, err := strconv.Atoi(g.Gid); err == nil {
				gid = n
			}
		}
	}
	return uid, gid
}

// readBackup reads and checks a whole archive: only regular files with
// local names, a manifest naming every entry, absolute clean target paths,
// and every size and sha256 matching. Any problem refuses all of it.
func readBackup(path string) (*backupManifest, map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("not a gzip'd tar: %w", err)
	}
	tr := tar.NewReader(zr)
	data := map[string][]byte{}
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read archive: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, nil, fmt.Errorf("entry %q is not a regular file (type %q)", hdr.Name, hdr.Typeflag)
		}
		if !filepath.IsLocal(hdr.Name) || strings.Contains(hdr.Name, `\`) || filepath.Clean(hdr.Name) != hdr.Name {
			return nil, nil, fmt.Errorf("entry %q: unsafe path", hdr.Name)
		}
		if _, dup := data[hdr.Name]; dup {
			return nil, nil, fmt.Errorf("entry %q appears twice", hdr.Name)
		}
		if hdr.Size > backupMaxFile || total+hdr.Size > backupMaxTotal {
			return nil, nil, fmt.Errorf("entry %q: too large", hdr.Name)
		}
		b, err := io.ReadAll(io.LimitReader(tr, hdr.Size+1))
		if err != nil {
			return nil, nil, fmt.Errorf("read entry %q: %w", hdr.Name, err)
		}
		total += int64(len(b))
		data[hdr.Name] = b
	}
	mj, ok := data["manifest.json"]
	if !ok {
		return nil, nil, errors.New("not a tabcast backup (no manifest.json)")
	}
	delete(data, "manifest.json")
	var m backupManifest
	dec := json.NewDecoder(bytes.NewReader(mj))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, nil, fmt.Errorf("manifest.json: %w", err)
	}
	if m.Version != backupFormat {
		return nil, nil, fmt.Errorf("manifest.json: version %d, this tabcast reads %d", m.Version, backupFormat)
	}
	var problems []string
	paths := map[string]bool{}
	named := map[string]bool{}
	for _, f := range m.Files {
		switch {
		case !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path || strings.Contains(f.Path, `\`):
			problems = append(problems, fmt.Sprintf("%q: not a clean absolute path", f.Path))
			continue
		case f.Entry != "files"+f.Path:
			problems = append(problems, fmt.Sprintf("%s: entry %q does not match the path", f.Path, f.Entry))
			continue
		case paths[f.Path]:
			problems = append(problems, fmt.Sprintf("%s: listed twice", f.Path))
			continue
		}
		paths[f.Path], named[f.Entry] = true, true
		if mode, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || mode > 0o777 {
			problems = append(problems, fmt.Sprintf("%s: bad mode %q", f.Path, f.Mode))
		}
		b, ok := data[f.Entry]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: missing from the archive", f.Path))
			continue
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != strings.ToLower(f.SHA256) || int64(len(b)) != f.Size {
			problems = append(problems, fmt.Sprintf("%s: sha256 %s, manifest says %s", f.Path, got, f.SHA256))
		}
	}
	var extra []string
	for name := range data {
		if !named[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		problems = append(problems, fmt.Sprintf("entry %q is not in the manifest", name))
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("the archive does not match its manifest (damaged or altered):\n  %s", strings.Join(problems, "\n  "))
	}
	return &m, data, nil
}
