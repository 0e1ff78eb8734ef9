package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/appliance/update"
)

// backupFixture is an appliance's files in a temp dir, and a "victim" tree
// standing for the rest of the system (/etc/cron.d, /root/.ssh) that a
// crafted backup aims at. Tests never name the real /etc: a regression
// must not write the machine's cron.
type backupFixture struct {
	dir, etc, data, cfg, victim string
	files                       map[string]os.FileMode // path → mode the rules give it
	owner                       fileOwner              // who restored files belong to
}

const (
	testUID = 4242 // a foreign owner
	nobody  = 65534
)

func newBackupFixture(t *testing.T, listen string) *backupFixture {
	t.Helper()
	dir := t.TempDir()
	f := &backupFixture{dir: dir, etc: filepath.Join(dir, "etc"), data: filepath.Join(dir, "data"), victim: filepath.Join(dir, "victim"), files: map[string]os.FileMode{}}
	f.cfg = filepath.Join(f.etc, "config.yaml")
	// Modes on disk differ from the rules where they can, to show that
	// restore applies the rules.
	write := func(path, content string, mode, rule os.FileMode) {
		noErr(t, os.MkdirAll(filepath.Dir(path), 0o700))
		noErr(t, os.WriteFile(path, []byte(content), mode))
		noErr(t, os.Chmod(path, mode))
		f.files[path] = rule
	}
	f.writeConfig(t, listen)
	f.files[f.cfg] = 0o640
	write(filepath.Join(f.etc, "users.yaml"), "users:\n  admin: {hash: x}\n", 0o600, 0o600)
	write(filepath.Join(f.etc, "extra.conf"), "kept because it is in the config directory\n", 0o644, 0o600)
	write(filepath.Join(f.data, "tokens.json"), `[{"id":"t1"}]`, 0o644, 0o600)
	write(filepath.Join(f.data, "tls-cert.pem"), "CERT\n", 0o600, 0o644)
	write(filepath.Join(f.data, "tls-key.pem"), "KEY\n", 0o600, 0o600)
	write(filepath.Join(f.data, "turn-secret"), "turn-secret-bytes", 0o600, 0o600)
	write(filepath.Join(f.data, "agent-token"), "tct_agent\n", 0o600, 0o600)
	// Not backed up: the audit log and browser profiles.
	noErr(t, os.WriteFile(filepath.Join(f.data, "audit.log"), []byte("{}\n"), 0o600))
	noErr(t, os.MkdirAll(filepath.Join(f.victim, "etc", "cron.d"), 0o755))
	old, oldActive, oldUser := dedicatedConfigDir, serviceActive, serviceUser
	t.Cleanup(func() { dedicatedConfigDir, serviceActive, serviceUser = old, oldActive, oldUser })
	dedicatedConfigDir = f.etc
	serviceActive = func() bool { return false }
	// As root, restored files go to the service user: "nobody" stands for
	// tabcast, so that the owner visibly comes from the rule.
	serviceUser = "nobody"
	f.owner = restoreOwner()
	return f
}

func (f *backupFixture) writeConfig(t *testing.T, listen string) {
	t.Helper()
	cfg := `server:
  listen: "` + listen + `"
  dataDir: ` + f.data + `
plugins:
  config:
    auth-local:
      usersFile: ` + filepath.Join(f.etc, "users.yaml") + `
      initialPasswordFile: ` + filepath.Join(f.etc, "initial-admin-password") + `
    turnd:
      secretFile: ` + filepath.Join(f.data, "turn-secret") + `
`
	noErr(t, os.MkdirAll(f.etc, 0o700))
	noErr(t, os.WriteFile(f.cfg, []byte(cfg), 0o644))
}

func (f *backupFixture) backup(t *testing.T, extra ...string) string {
	t.Helper()
	out := filepath.Join(f.dir, fmt.Sprintf("backup-%d.tar.gz", time.Now().UnixNano()))
	var stdout, stderr bytes.Buffer
	if code := realMain(append([]string{"backup", "-o", out, "--config", f.cfg}, extra...), &stdout, &stderr); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "initial-admin-password (one-time admin password (auth-local)): does not exist") {
		t.Errorf("backup does not report the missing file:\n%s", stdout.String())
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", st, err)
	}
	return out
}

// wipe removes every backed-up file but the local config, which says where
// they go, and the data directory itself.
func (f *backupFixture) wipe(t *testing.T) {
	t.Helper()
	for path := range f.files {
		if path != f.cfg {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	noErr(t, os.RemoveAll(f.data))
}

// check compares contents with want, and mode and owner with the rules.
func (f *backupFixture) check(t *testing.T, want map[string]string) {
	t.Helper()
	for path, mode := range f.files {
		st, err := os.Lstat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if !st.Mode().IsRegular() || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v from the rules", path, st.Mode(), mode)
		}
		if uid := statUID(st); uid != uint32(f.owner.uid) {
			t.Errorf("%s: owner %d, want %d from the rules", path, uid, f.owner.uid)
		}
		got, _ := os.ReadFile(path)
		if string(got) != want[path] {
			t.Errorf("%s: content %q, want %q", path, got, want[path])
		}
	}
}

func (f *backupFixture) contents(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for path := range f.files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out[path] = string(b)
	}
	return out
}

// restore runs tabcast restore with this fixture's local config.
func (f *backupFixture) restore(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := realMain(append([]string{"restore", "--config", f.cfg}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// snapshot is every file, directory and link under root: type, mode,
// owner, size, content hash or link target.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(path)
		if err != nil {
			return err
		}
		s := fmt.Sprintf("%v uid=%d", st.Mode(), statUID(st))
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(path)
			s += " -> " + l
		case st.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			s += fmt.Sprintf(" %d %x", len(b), sum[:8])
		}
		out[path] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	var diff []string
	for p, s := range after {
		if before[p] != s {
			diff = append(diff, fmt.Sprintf("%s: %q -> %q", p, before[p], s))
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			diff = append(diff, p+": removed")
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("a refused restore changed the tree:\n  %s", strings.Join(diff, "\n  "))
	}
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	want := f.contents(t)
	out := f.backup(t)

	files := untar(t, out)
	var m backupManifest
	noErr(t, json.Unmarshal([]byte(files["manifest.json"]), &m))
	if len(m.Files) != len(f.files) || m.Version != 1 {
		t.Errorf("manifest (version %d) lists %d files, want %d: %+v", m.Version, len(m.Files), len(f.files), m.Files)
	}
	for _, e := range m.Files {
		if strings.Contains(e.Path, "audit.log") {
			t.Errorf("audit log backed up")
		}
	}
	if _, ok := files["manifest.sig"]; ok {
		t.Errorf("an unsigned backup has manifest.sig")
	}

	// Existing files are kept without --force; a dry run says so.
	noErr(t, os.WriteFile(filepath.Join(f.data, "tokens.json"), []byte("changed"), 0o600))
	before := snapshot(t, f.dir)
	code, stdout, stderr := f.restore(out)
	if code != 1 || !strings.Contains(stderr, "refused (restore_would_replace): refusing to replace existing files") {
		t.Errorf("restore over existing files: exit %d, %s", code, stderr)
	}
	code, stdout, _ = f.restore(out, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "needs --force") || !strings.Contains(stdout, "UNSIGNED") {
		t.Errorf("dry run: exit %d:\n%s", code, stdout)
	}
	sameTree(t, before, snapshot(t, f.dir))
	if code, _, stderr = f.restore("--force", out); code != 0 {
		t.Fatalf("restore --force: exit %d: %s", code, stderr)
	}
	f.check(t, want)

	// A box that lost everything but its config: the data directory is
	// made again (0700, the service user's).
	f.wipe(t)
	code, stdout, _ = f.restore(out, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would write 0600 "+filepath.Join(f.data, "tokens.json")) ||
		!strings.Contains(stdout, "would create directory "+f.data) {
		t.Errorf("dry run: exit %d:\n%s", code, stdout)
	}
	if _, err := os.Stat(f.data); err == nil {
		t.Errorf("dry run made %s", f.data)
	}
	if code, stdout, stderr = f.restore(out, "--force"); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "Restored 8 file(s)") || !strings.Contains(stdout, "created directory "+f.data) {
		t.Errorf("restore output:\n%s", stdout)
	}
	f.check(t, want)
	if st, err := os.Stat(f.data); err != nil || st.Mode().Perm() != 0o700 || statUID(st) != uint32(f.owner.uid) {
		t.Errorf("data directory: %v %v (uid %d), want 0700 owned by %d", st.Mode(), err, statUID(st), f.owner.uid)
	}

	if code, _, _ := f.restore(); code != 2 {
		t.Errorf("restore without FILE: exit %d, want 2", code)
	}
}

// testArchive is a backup taken apart, to craft a bad one from.
type testArchive struct {
	m       backupManifest
	sig     []byte
	entries []rawEntry // files/…, in order
}

type rawEntry struct {
	hdr  *tar.Header
	data []byte
}

func loadArchive(t *testing.T, path string) *testArchive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	a := &testArchive{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return a
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch hdr.Name {
		case "manifest.json":
			noErr(t, json.Unmarshal(b, &a.m))
		case "manifest.sig":
			a.sig = b
		default:
			a.entries = append(a.entries, rawEntry{hdr, b})
		}
	}
}

// addFile lists a file in the manifest, with a correct sha256, and adds
// its entry.
func (a *testArchive) addFile(path, what string, data []byte) *backupFile {
	sum := sha256.Sum256(data)
	a.m.Files = append(a.m.Files, backupFile{Path: path, Entry: "files" + path, What: what, Mode: "0777",
		Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), UID: testUID, GID: testUID, User: "daemon"})
	a.addEntry("files"+path, data)
	return &a.m.Files[len(a.m.Files)-1]
}

func (a *testArchive) addEntry(name string, data []byte) {
	a.entries = append(a.entries, rawEntry{&tar.Header{Name: name, Mode: 0o777, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Now()}, data})
}

func (a *testArchive) file(what string) *backupFile {
	for i := range a.m.Files {
		if a.m.Files[i].What == what {
			return &a.m.Files[i]
		}
	}
	panic("no " + what)
}

func (a *testArchive) entry(name string) *rawEntry {
	for i := range a.entries {
		if a.entries[i].hdr.Name == name {
			return &a.entries[i]
		}
	}
	panic("no entry " + name)
}

func (a *testArchive) dropEntry(name string) {
	for i := range a.entries {
		if a.entries[i].hdr.Name == name {
			a.entries = append(a.entries[:i], a.entries[i+1:]...)
			return
		}
	}
	panic("no entry " + name)
}

func (a *testArchive) write(t *testing.T, out string) {
	t.Helper()
	mj, err := json.MarshalIndent(a.m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	a.writeRaw(t, out, append(mj, '\n'))
}

func (a *testArchive) writeRaw(t *testing.T, out string, manifest []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	put := func(hdr *tar.Header, data []byte) {
		noErr(t, tw.WriteHeader(hdr))
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	put(&tar.Header{Name: "manifest.json", Mode: 0o600, Size: int64(len(manifest)), Typeflag: tar.TypeReg, ModTime: time.Now()}, manifest)
	if a.sig != nil {
		put(&tar.Header{Name: "manifest.sig", Mode: 0o600, Size: int64(len(a.sig)), Typeflag: tar.TypeReg, ModTime: time.Now()}, a.sig)
	}
	for _, e := range a.entries {
		if e.hdr.Typeflag == tar.TypeReg {
			e.hdr.Size = int64(len(e.data))
		}
		put(e.hdr, e.data)
	}
	noErr(t, tw.Close())
	noErr(t, zw.Close())
	noErr(t, os.WriteFile(out, buf.Bytes(), 0o600))
}

// refusedWhole runs restore on archive with and without --force and
// --dry-run: each must be refused with code, and the whole temp tree,
// victim included, must be exactly as before.
func (f *backupFixture) refusedWhole(t *testing.T, archive, code string, extra ...string) {
	t.Helper()
	before := snapshot(t, f.dir)
	for _, args := range [][]string{{archive}, {archive, "--force"}, {archive, "--dry-run"}} {
		got, _, stderr := f.restore(append(args, extra...)...)
		if got != 1 || !strings.Contains(stderr, "refused (") || !strings.Contains(stderr, code) || !strings.Contains(stderr, "nothing was written") {
			t.Errorf("restore %v: exit %d, stderr %q; want 1, refused (%s), nothing was written", args, got, stderr, code)
		}
	}
	sameTree(t, before, snapshot(t, f.dir))
}

func TestRestoreRefusesCraftedArchives(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	good := f.backup(t)
	f.wipe(t)
	cron := filepath.Join(f.victim, "etc", "cron.d", "evil")
	authKeys := filepath.Join(f.victim, "root", ".ssh", "authorized_keys")
	payload := []byte("* * * * * root sh -c 'id > /tmp/pwned'\n")

	for _, tc := range []struct {
		name  string
		craft func(a *testArchive)
		code  string
		limit int64 // backupMaxFile for this case; 0 keeps it
	}{
		{"cron.d file as a config directory file, mode 0777, foreign owner", func(a *testArchive) {
			a.addFile(cron, roleConfigDir, payload)
		}, codePath, 0},
		{"cron.d file as the config file", func(a *testArchive) {
			a.addFile(cron, roleConfig, payload)
			// The real config entry goes, so the role is not a duplicate.
			a.m.Files = a.m.Files[1:]
		}, codePath, 0},
		{"authorized_keys as the users file", func(a *testArchive) {
			u := a.file(roleUsers)
			e := a.entry(u.Entry)
			e.hdr.Name, e.data = "files"+authKeys, []byte("ssh-ed25519 AAAA attacker\n")
			sum := sha256.Sum256(e.data)
			u.Path, u.Entry, u.Size, u.SHA256 = authKeys, "files"+authKeys, int64(len(e.data)), hex.EncodeToString(sum[:])
			u.Mode, u.UID, u.User = "0777", testUID, "daemon"
		}, codePath, 0},
		{"../ traversal in the manifest's path", func(a *testArchive) {
			p := f.etc + "/../victim/etc/cron.d/evil"
			a.addFile(p, roleConfigDir, payload)
			a.entries[len(a.entries)-1].hdr.Name = "files" + filepath.Clean(p)
		}, codePath, 0},
		{"../ traversal in a tar name", func(a *testArchive) {
			a.addEntry("../../victim/escape", payload)
		}, codeEntryName, 0},
		{"absolute tar name", func(a *testArchive) {
			a.addEntry(cron, payload)
		}, codeEntryName, 0},
		{"role tabcast does not back up", func(a *testArchive) {
			a.addFile(authKeys, "ssh authorized keys", payload)
		}, codeUnknown, 0},
		{"extra entry the manifest does not list", func(a *testArchive) {
			a.addEntry("files"+filepath.Join(f.etc, "cron"), payload)
		}, codeUnlisted, 0},
		{"a role listed twice", func(a *testArchive) {
			a.m.Files = append(a.m.Files, *a.file(roleTokens))
		}, codeDuplicate, 0},
		{"an entry twice", func(a *testArchive) {
			tok := a.file(roleTokens)
			a.addEntry(tok.Entry, a.entry(tok.Entry).data)
		}, codeDuplicate, 0},
		{"tar symlink entry", func(a *testArchive) {
			a.entries = append(a.entries, rawEntry{&tar.Header{Name: "files" + filepath.Join(f.etc, "link"), Typeflag: tar.TypeSymlink, Linkname: authKeys, Mode: 0o777}, nil})
		}, codeEntryType, 0},
		{"tar symlink in place of a listed file", func(a *testArchive) {
			e := a.entry(a.file(roleTokens).Entry)
			e.hdr = &tar.Header{Name: e.hdr.Name, Typeflag: tar.TypeSymlink, Linkname: authKeys, Mode: 0o777}
			e.data = nil
		}, codeEntryType, 0},
		{"tar hard link entry", func(a *testArchive) {
			a.entries = append(a.entries, rawEntry{&tar.Header{Name: "files/x", Typeflag: tar.TypeLink, Linkname: "manifest.json"}, nil})
		}, codeEntryType, 0},
		{"tar device entry", func(a *testArchive) {
			a.entries = append(a.entries, rawEntry{&tar.Header{Name: "files/dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}, nil})
		}, codeEntryType, 0},
		{"tampered content", func(a *testArchive) {
			a.entry(a.file(roleTokens).Entry).data = []byte(`[{"id":"evil"}]`)
		}, codeChecksum, 0},
		{"listed entry missing", func(a *testArchive) { a.dropEntry(a.file(roleTokens).Entry) }, codeMissing, 0},
		{"oversized file", func(a *testArchive) {}, codeTooLarge, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := loadArchive(t, good)
			tc.craft(a)
			bad := filepath.Join(f.dir, "bad.tar.gz")
			a.write(t, bad)
			if tc.limit > 0 {
				old := backupMaxFile
				backupMaxFile = tc.limit
				defer func() { backupMaxFile = old }()
			}
			f.refusedWhole(t, bad, tc.code)
			for _, p := range []string{cron, authKeys, filepath.Join(f.dir, "escape"), filepath.Join(f.victim, "escape")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s written", p)
				}
			}
		})
	}
	// The same good archive still restores: the refusals were the crafts'.
	if code, _, stderr := f.restore(good, "--force"); code != 0 {
		t.Errorf("good archive: exit %d: %s", code, stderr)
	}
}

// The mode and owner a manifest records are never used: a well-formed
// archive saying 0777 and a foreign owner restores with the rules'.
func TestRestoreIgnoresArchiveModeAndOwner(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	want := f.contents(t)
	a := loadArchive(t, f.backup(t))
	for i := range a.m.Files {
		a.m.Files[i].Mode, a.m.Files[i].UID, a.m.Files[i].GID, a.m.Files[i].User, a.m.Files[i].Group = "0777", testUID, testUID, "daemon", "daemon"
	}
	for _, e := range a.entries {
		e.hdr.Mode, e.hdr.Uid, e.hdr.Gid = 0o4777, testUID, testUID
	}
	archive := filepath.Join(f.dir, "modes.tar.gz")
	a.write(t, archive)
	f.wipe(t)
	code, stdout, stderr := f.restore(archive, "--force")
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `the archive's mode "0777" not used`) {
		t.Errorf("restore does not say the archive's mode was not used:\n%s", stdout)
	}
	f.check(t, want)
}

func TestRestoreRefusesUnsafeParents(t *testing.T) {
	root := os.Geteuid() == 0
	// link replaces dir with a link to target made by someone other than
	// root (as root, the link is given away; otherwise it is this user's).
	link := func(target, dir string) {
		noErr(t, os.MkdirAll(filepath.Dir(target), 0o700))
		if _, err := os.Stat(dir); err == nil {
			noErr(t, os.Rename(dir, target))
		} else {
			noErr(t, os.MkdirAll(target, 0o700))
		}
		noErr(t, os.Symlink(target, dir))
		if root {
			noErr(t, os.Lchown(dir, nobody, nobody))
		}
	}
	for _, tc := range []struct {
		name     string
		needRoot bool
		setup    func(f *backupFixture)
	}{
		// The service user could replace a directory it owns with a link.
		{"symlinked data directory", false, func(f *backupFixture) { link(filepath.Join(f.victim, "root", ".ssh"), f.data) }},
		// The config still loads through it; nothing is written through it.
		{"symlinked config directory", false, func(f *backupFixture) { link(filepath.Join(f.victim, "etc-moved"), f.etc) }},
		{"directory writable by others", false, func(f *backupFixture) {
			noErr(t, os.Mkdir(f.data, 0o700))
			noErr(t, os.Chmod(f.data, 0o777))
		}},
		{"directory of a foreign owner", true, func(f *backupFixture) {
			noErr(t, os.Mkdir(f.data, 0o700))
			noErr(t, os.Chown(f.data, testUID, testUID))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needRoot && !root {
				t.Skip("needs root to give a directory away")
			}
			f := newBackupFixture(t, "127.0.0.1:0")
			good := f.backup(t)
			f.wipe(t)
			tc.setup(f)
			f.refusedWhole(t, good, codeParent)
		})
	}
	t.Run("a link root made where only root can change it is followed", func(t *testing.T) {
		if !root {
			t.Skip("the link must be root's")
		}
		// The image: /etc/tabcast -> /var/lib/tabcast/etc.
		f := newBackupFixture(t, "127.0.0.1:0")
		want := f.contents(t)
		good := f.backup(t)
		real := filepath.Join(f.dir, "var-lib-tabcast")
		noErr(t, os.Rename(f.data, real))
		noErr(t, os.Symlink(real, f.data))
		noErr(t, os.Remove(filepath.Join(real, "tokens.json")))
		if code, _, stderr := f.restore(good, "--force"); code != 0 {
			t.Fatalf("restore: exit %d: %s", code, stderr)
		}
		if b, err := os.ReadFile(filepath.Join(real, "tokens.json")); err != nil || string(b) != want[filepath.Join(f.data, "tokens.json")] {
			t.Errorf("tokens.json through the link: %q %v", b, err)
		}
		if st, err := os.Lstat(f.data); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v %v", st, err)
		}
	})
}

func TestRestoreRunningCheckUsesLocalListen(t *testing.T) {
	health := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
		}
	})
	// A is where the backed-up config (and manifest "listen") points; B is
	// this appliance's server.listen.
	srvA, srvB := httptest.NewServer(health), httptest.NewServer(health)
	defer srvA.Close()
	defer srvB.Close()
	a, b := srvA.Listener.Addr().String(), srvB.Listener.Addr().String()
	f := newBackupFixture(t, a)
	full := f.backup(t)
	if m := loadArchive(t, full).m; m.Listen != a {
		t.Fatalf("manifest listen %q, want %q", m.Listen, a)
	}
	// Without its config file, the backup replaces nothing on a wiped box:
	// only the running check can stop it.
	ar := loadArchive(t, full)
	ar.dropEntry(ar.file(roleConfig).Entry)
	ar.m.Files = ar.m.Files[1:]
	archive := filepath.Join(f.dir, "no-config.tar.gz")
	ar.write(t, archive)
	f.wipe(t)
	f.writeConfig(t, b)

	before := snapshot(t, f.dir)
	code, _, stderr := f.restore(archive)
	if code != 1 || !strings.Contains(stderr, "refused (restore_appliance_running): an appliance answers on http://"+b+"/healthz") {
		t.Errorf("restore with the local listen answering: exit %d: %s", code, stderr)
	}
	serviceActive = func() bool { return true }
	if code, _, stderr = f.restore(archive); code != 1 || !strings.Contains(stderr, "refused (restore_appliance_running): tabcast.service is active") {
		t.Errorf("restore while the service is active: exit %d: %s", code, stderr)
	}
	serviceActive = func() bool { return false }
	sameTree(t, before, snapshot(t, f.dir))

	// Only A answers now: it is the archive's, and not probed.
	srvB.Close()
	if code, _, stderr = f.restore(archive); code != 0 {
		t.Errorf("restore with only the archive's listen answering: exit %d: %s", code, stderr)
	}
	// The local config says so even when it is being replaced.
	srvB2 := httptest.NewUnstartedServer(health)
	srvB2.Listener.Close()
	srvB2.Listener = mustListen(t, b)
	srvB2.Start()
	defer srvB2.Close()
	if code, _, stderr = f.restore(full, "--dry-run"); code != 0 {
		t.Errorf("dry run: exit %d: %s", code, stderr)
	}
	if code, _, stderr = f.restore(full); code != 1 || !strings.Contains(stderr, "answers on http://"+b+"/healthz") {
		t.Errorf("restore of the full backup with the local listen answering: exit %d: %s", code, stderr)
	}
	if code, _, stderr = f.restore(full, "--force"); code != 0 {
		t.Fatalf("restore --force: exit %d: %s", code, stderr)
	}
}

// noErr stops the test on a setup error.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustListen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBackupSigned(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	want := f.contents(t)
	keys := t.TempDir()
	priv, pub, err := update.GenerateKey(filepath.Join(keys, "trusted"), "")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := update.GenerateKey(filepath.Join(keys, "other"), "")
	if err != nil {
		t.Fatal(err)
	}
	sk, err := update.LoadPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	id := update.KeyID(sk.Public().(ed25519.PublicKey))

	var stdout, stderr bytes.Buffer
	signed := filepath.Join(f.dir, "signed.tar.gz")
	if code := realMain([]string{"backup", "-o", signed, "--config", f.cfg, "--sign", priv}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "(signed by update key "+id+")") {
		t.Fatalf("backup --sign: exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	if seed := base64.StdEncoding.EncodeToString(sk.Seed()); strings.Contains(stdout.String()+stderr.String(), seed) {
		t.Error("backup --sign printed the signing key")
	}
	f.wipe(t)
	code, out, errs := f.restore(signed, "--dry-run", "--pubkey", pub)
	if code != 0 || !strings.Contains(out, "signed by update key "+id+" (verified against "+pub+")") {
		t.Errorf("dry run of a signed backup: exit %d: %s%s", code, out, errs)
	}
	if code, out, errs = f.restore(signed, "--force", "--pubkey", pub, "--require-signed"); code != 0 ||
		!strings.Contains(out, "signed by update key "+id) {
		t.Fatalf("restore of a signed backup: exit %d: %s%s", code, out, errs)
	}
	f.check(t, want)
	f.wipe(t)

	// Unsigned: said so, and refused when a signature is required.
	unsigned := f.backup(t)
	f.wipe(t)
	if code, out, _ = f.restore(unsigned, "--dry-run", "--pubkey", pub); code != 0 || !strings.Contains(out, "UNSIGNED") {
		t.Errorf("dry run of an unsigned backup: exit %d: %s", code, out)
	}
	f.refusedWhole(t, unsigned, codeUnsigned, "--require-signed", "--pubkey", pub)

	bad := filepath.Join(f.dir, "bad.tar.gz")
	t.Run("tampered signature", func(t *testing.T) {
		a := loadArchive(t, signed)
		a.sig[0] ^= 1
		a.write(t, bad)
		f.refusedWhole(t, bad, codeSignature, "--pubkey", pub)
	})
	t.Run("a file changed after signing, its sha256 fixed", func(t *testing.T) {
		a := loadArchive(t, signed)
		tok := a.file(roleTokens)
		e := a.entry(tok.Entry)
		e.data = []byte(`[{"id":"attacker"}]`)
		sum := sha256.Sum256(e.data)
		tok.Size, tok.SHA256 = int64(len(e.data)), hex.EncodeToString(sum[:])
		a.write(t, bad)
		f.refusedWhole(t, bad, codeSignature, "--pubkey", pub)
	})
	t.Run("signed by a key not trusted", func(t *testing.T) {
		otherSigned := f.backup(t, "--sign", other)
		f.wipe(t)
		f.refusedWhole(t, otherSigned, codeSignature, "--pubkey", pub)
	})
	t.Run("no trusted keys to check it with", func(t *testing.T) {
		f.refusedWhole(t, signed, codeKeys, "--pubkey", filepath.Join(keys, "missing.pub"))
	})
	t.Run("a signing key others can read", func(t *testing.T) {
		loose := filepath.Join(keys, "loose.key")
		b, _ := os.ReadFile(priv)
		noErr(t, os.WriteFile(loose, b, 0o644))
		var stdout, stderr bytes.Buffer
		out := filepath.Join(f.dir, "loose.tar.gz")
		if code := realMain([]string{"backup", "-o", out, "--config", f.cfg, "--sign", loose}, &stdout, &stderr); code != 1 ||
			!strings.Contains(stderr.String(), "must not be readable by group or others") {
			t.Errorf("backup --sign with a 0644 key: exit %d: %s", code, stderr.String())
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("a backup was written")
		}
	})
}

// A format 1 manifest as the first backup release wrote it (field for
// field) still restores, by role.
func TestRestoreReadsFormat1(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	cfgData, _ := os.ReadFile(f.cfg)
	tokens := filepath.Join(f.data, "tokens.json")
	tokData := []byte(`[{"id":"old"}]`)
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	manifest := fmt.Sprintf(`{
  "version": 1,
  "tabcastVersion": "0.9.0",
  "created": "2025-01-02T03:04:05Z",
  "host": "old-box",
  "listen": "127.0.0.1:1",
  "files": [
    {"path": %q, "entry": %q, "what": "config file", "mode": "0644", "size": %d, "sha256": %q, "uid": 0, "gid": 0, "user": "root", "group": "root"},
    {"path": %q, "entry": %q, "what": "API tokens", "mode": "0600", "size": %d, "sha256": %q, "uid": 999, "gid": 999, "user": "tabcast", "group": "tabcast"}
  ],
  "skipped": [{"path": "/nowhere", "what": "TLS key", "reason": "does not exist"}]
}
`, f.cfg, "files"+f.cfg, len(cfgData), sum(cfgData), tokens, "files"+tokens, len(tokData), sum(tokData))
	a := &testArchive{}
	a.addEntry("files"+f.cfg, cfgData)
	a.addEntry("files"+tokens, tokData)
	archive := filepath.Join(f.dir, "format1.tar.gz")
	a.writeRaw(t, archive, []byte(manifest))
	code, out, errs := f.restore(archive, "--force")
	if code != 0 || !strings.Contains(out, "Restored 2 file(s)") {
		t.Fatalf("restore of a format 1 backup: exit %d: %s%s", code, out, errs)
	}
	if b, _ := os.ReadFile(tokens); !bytes.Equal(b, tokData) {
		t.Errorf("tokens.json: %q", b)
	}
	if st, err := os.Stat(tokens); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("tokens.json: %v %v", st, err)
	}
}

func TestRestoreErrorCarriesCodes(t *testing.T) {
	var r refusal
	r.add(codePath, "a")
	r.add(codeUnknown, "b")
	r.add(codePath, "c")
	got := r.Error()
	if !strings.HasPrefix(got, "refused (backup_path_not_allowed, backup_entry_unknown): 3 problems; nothing was written:") ||
		!strings.Contains(got, "\n  backup_entry_unknown: b") {
		t.Errorf("refusal: %q", got)
	}
}
