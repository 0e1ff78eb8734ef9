package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// backupFixture is an appliance's files in a temp dir.
type backupFixture struct {
	dir, etc, data, cfg string
	files               map[string]os.FileMode // path → mode
}

func newBackupFixture(t *testing.T, listen string) *backupFixture {
	t.Helper()
	dir := t.TempDir()
	f := &backupFixture{dir: dir, etc: filepath.Join(dir, "etc"), data: filepath.Join(dir, "data"), files: map[string]os.FileMode{}}
	f.cfg = filepath.Join(f.etc, "config.yaml")
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
	write := func(path, content string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		f.files[path] = mode
	}
	write(f.cfg, cfg, 0o640)
	write(filepath.Join(f.etc, "users.yaml"), "users:\n  admin: {hash: x}\n", 0o600)
	write(filepath.Join(f.etc, "extra.conf"), "kept because it is in the config directory\n", 0o644)
	write(filepath.Join(f.data, "tokens.json"), `[{"id":"t1"}]`, 0o600)
	write(filepath.Join(f.data, "tls-cert.pem"), "CERT\n", 0o644)
	write(filepath.Join(f.data, "tls-key.pem"), "KEY\n", 0o600)
	write(filepath.Join(f.data, "turn-secret"), "turn-secret-bytes", 0o600)
	write(filepath.Join(f.data, "agent-token"), "tct_agent\n", 0o600)
	// Not backed up: the audit log and browser profiles.
	if err := os.WriteFile(filepath.Join(f.data, "audit.log"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old, oldActive := dedicatedConfigDir, serviceActive
	t.Cleanup(func() { dedicatedConfigDir, serviceActive = old, oldActive })
	dedicatedConfigDir = f.etc
	serviceActive = func() bool { return false }
	return f
}

func (f *backupFixture) backup(t *testing.T) string {
	t.Helper()
	out := filepath.Join(f.dir, "backup.tar.gz")
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"backup", "-o", out, "--config", f.cfg}, &stdout, &stderr); code != 0 {
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

func (f *backupFixture) wipe(t *testing.T) {
	t.Helper()
	for _, d := range []string{f.etc, f.data} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *backupFixture) check(t *testing.T, want map[string]string) {
	t.Helper()
	for path, mode := range f.files {
		st, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), mode)
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

func restoreCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := realMain(append([]string{"restore"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	want := f.contents(t)
	out := f.backup(t)

	files := untar(t, out)
	var m backupManifest
	if err := json.Unmarshal([]byte(files["manifest.json"]), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != len(f.files) {
		t.Errorf("manifest lists %d files, want %d: %+v", len(m.Files), len(f.files), m.Files)
	}
	for _, e := range m.Files {
		if strings.Contains(e.Path, "audit.log") {
			t.Errorf("audit log backed up")
		}
	}

	// Existing files are kept without --force; a dry run says so.
	if err := os.WriteFile(filepath.Join(f.data, "tokens.json"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := restoreCmd(out)
	if code != 1 || !strings.Contains(stderr, "refusing to replace existing files") {
		t.Errorf("restore over existing files: exit %d, %s", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(f.data, "tokens.json")); string(b) != "changed" {
		t.Errorf("a refused restore wrote tokens.json")
	}
	code, stdout, _ = restoreCmd(out, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "needs --force") {
		t.Errorf("dry run: exit %d:\n%s", code, stdout)
	}
	if code, _, stderr = restoreCmd("--force", out); code != 0 {
		t.Fatalf("restore --force: exit %d: %s", code, stderr)
	}
	f.check(t, want)

	f.wipe(t)
	code, stdout, _ = restoreCmd(out, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would write 0640 "+f.cfg) {
		t.Errorf("dry run: exit %d:\n%s", code, stdout)
	}
	if _, err := os.Stat(f.etc); err == nil {
		t.Errorf("dry run wrote %s", f.etc)
	}
	if code, stdout, stderr = restoreCmd(out); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "Restored 8 file(s)") {
		t.Errorf("restore output:\n%s", stdout)
	}
	f.check(t, want)

	if code, _, _ := restoreCmd(); code != 2 {
		t.Errorf("restore without FILE: exit %d, want 2", code)
	}
}

// rewrite re-packs a backup through edit, which may change entries.
func rewrite(t *testing.T, in, out string, edit func(hdr *tar.Header, data []byte) []byte, extra ...tarEntry) {
	t.Helper()
	files := untarHeaders(t, in)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range files {
		data := edit(e.hdr, e.data)
		e.hdr.Size = int64(len(data))
		if err := tw.WriteHeader(e.hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range extra {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg, ModTime: time.Now()}
		if e.mode < 0 {
			hdr = &tar.Header{Name: e.name, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd", ModTime: time.Now()}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

type rawEntry struct {
	hdr  *tar.Header
	data []byte
}

func untarHeaders(t *testing.T, path string) []rawEntry {
	t.Helper()
	files := untar(t, path)
	// untar loses order and headers; rebuild them simply.
	var out []rawEntry
	for name, data := range files {
		out = append(out, rawEntry{hdr: &tar.Header{Name: name, Mode: 0o600, Typeflag: tar.TypeReg, ModTime: time.Now()}, data: []byte(data)})
	}
	return out
}

func TestRestoreRefusesBadArchives(t *testing.T) {
	f := newBackupFixture(t, "127.0.0.1:0")
	out := f.backup(t)
	f.wipe(t)
	bad := filepath.Join(f.dir, "bad.tar.gz")
	keep := func(_ *tar.Header, data []byte) []byte { return data }

	for _, tc := range []struct {
		name  string
		edit  func(*tar.Header, []byte) []byte
		extra []tarEntry
		want  string
	}{
		{"tampered", func(hdr *tar.Header, data []byte) []byte {
			if strings.HasSuffix(hdr.Name, "tokens.json") {
				return []byte(`[{"id":"evil"}]`)
			}
			return data
		}, nil, "does not match its manifest"},
		{"traversal entry", keep, []tarEntry{{name: "../../escape", mode: 0o600, data: []byte("x")}}, "unsafe path"},
		{"absolute entry", keep, []tarEntry{{name: "/tmp/escape", mode: 0o600, data: []byte("x")}}, "unsafe path"},
		{"symlink entry", keep, []tarEntry{{name: "files/link", mode: -1}}, "not a regular file"},
		{"unlisted entry", keep, []tarEntry{{name: "files/etc/cron.d/x", mode: 0o600, data: []byte("x")}}, "not in the manifest"},
		{"traversal in manifest", func(hdr *tar.Header, data []byte) []byte {
			if hdr.Name == "manifest.json" {
				var m backupManifest
				if err := json.Unmarshal(data, &m); err != nil {
					t.Fatal(err)
				}
				m.Files[0].Path = f.etc + "/../../../escape"
				b, _ := json.Marshal(m)
				return b
			}
			return data
		}, nil, "not a clean absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rewrite(t, out, bad, tc.edit, tc.extra...)
			for _, args := range [][]string{{bad}, {bad, "--force"}, {bad, "--dry-run"}} {
				code, _, stderr := restoreCmd(args...)
				if code != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "nothing was written") {
					t.Errorf("restore %v: exit %d, stderr %q; want 1 and %q", args, code, stderr, tc.want)
				}
			}
			for path := range f.files {
				if _, err := os.Stat(path); err == nil {
					t.Errorf("refused restore wrote %s", path)
				}
			}
			if _, err := os.Stat(filepath.Join(f.dir, "escape")); err == nil {
				t.Errorf("escape written")
			}
		})
	}
}

func TestRestoreRefusesWhileRunning(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	f := newBackupFixture(t, srv.Listener.Addr().String())
	want := f.contents(t)
	out := f.backup(t)
	f.wipe(t)
	code, _, stderr := restoreCmd(out)
	if code != 1 || !strings.Contains(stderr, "answers on http://"+srv.Listener.Addr().String()+"/healthz") {
		t.Errorf("restore while running: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(f.cfg); err == nil {
		t.Errorf("refused restore wrote the config")
	}
	serviceActive = func() bool { return true }
	srv.Close()
	if code, _, stderr = restoreCmd(out); code != 1 || !strings.Contains(stderr, "tabcast.service is active") {
		t.Errorf("restore while the service is active: exit %d: %s", code, stderr)
	}
	if code, _, stderr = restoreCmd(out, "--force"); code != 0 {
		t.Fatalf("restore --force: exit %d: %s", code, stderr)
	}
	f.check(t, want)
}
