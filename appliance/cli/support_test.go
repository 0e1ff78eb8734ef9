package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// untar reads a .tar.gz into name → content, checking every entry is a
// regular file.
func untar(t *testing.T, path string) map[string]string {
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
	out := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			t.Fatalf("entry %s has type %q", hdr.Name, hdr.Typeflag)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = string(b)
	}
}

func TestSupportBundleRedacts(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	cfgYAML := `server:
  listen: "127.0.0.1:0"
  dataDir: ` + data + `
browser:
  path: ` + filepath.Join(dir, "no-chromium") + `
webrtc:
  udpPort: 0
  tcp: false
  advertise: ["203.0.113.9"]
turn:
  enabled: false
plugins:
  dir: ` + filepath.Join(dir, "plugins") + `
  config:
    auth-local:
      usersFile: ` + filepath.Join(dir, "users.yaml") + `
    example:
      apiPassword: inline-secret-value
      nested:
        clientSecret: nested-secret-value
`
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A plugin binary to hash.
	if err := os.WriteFile(filepath.Join(dir, "plugins", "capture-cdp"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	audit := strings.Join([]string{
		`{"time":"2026-01-02T03:04:05Z","action":"token.create","user":"admin","outcome":"ok","source":"192.168.7.23:51234","detail":"tct_SECRETTOKENVALUE123"}`,
		`v=0`,
		`a=candidate:1 1 udp 2130706431 10.9.8.7 8443 typ host`,
		`a=ice-pwd:SECRETICEPWD`,
		`{"action":"x","source":"[2001:db8::42]:443","sdp":"v=0\r\no=- 1 2 IN IP4 10.5.5.5\r\n"}`,
		`login password=hunter2 secret=s3cr3tv4lue`,
		`  clientSecret: yamlsecretvalue`,
		`viewer from 127.0.0.1:8080 and [::1]:9 stays`,
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(data, "audit.log"), []byte(audit), 0o600); err != nil {
		t.Fatal(err)
	}

	oldJournal, oldTimeout := supportJournal, supportDoctorTimeout
	t.Cleanup(func() { supportJournal, supportDoctorTimeout = oldJournal, oldTimeout })
	supportJournal = []string{"sh", "-c", `echo "tabcast[1]: GET /api Authorization: Bearer abc.def.ghi from 172.16.0.4"`}
	supportDoctorTimeout = 30 * time.Second

	out := filepath.Join(dir, "bundle.tar.gz")
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"support-bundle", "-o", out, "--config", cfgPath, "--logs", "100"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v, want 0600", st.Mode().Perm())
	}
	files := untar(t, out)
	var all strings.Builder
	for _, name := range []string{"config.yaml", "doctor.txt", "versions.txt", "logs.txt", "MANIFEST.txt"} {
		body, ok := files["bundle/"+name]
		if !ok {
			t.Errorf("bundle has no %s; has %v", name, keys(files))
			continue
		}
		if strings.TrimSpace(body) == "" {
			t.Errorf("%s is empty", name)
		}
		all.WriteString(body)
	}
	text := all.String()
	for _, secret := range []string{
		"inline-secret-value", "nested-secret-value", "SECRETTOKENVALUE123", "192.168.7.23", "10.9.8.7",
		"SECRETICEPWD", "2001:db8::42", "10.5.5.5", "hunter2", "s3cr3tv4lue", "yamlsecretvalue", "abc.def", "172.16.0.4", "203.0.113.9",
		"a=candidate",
	} {
		if strings.Contains(text, secret) {
			t.Errorf("bundle contains %q", secret)
		}
	}
	for _, kept := range []string{"127.0.0.1:8080", "[::1]:9", "users.yaml", "Bearer ****", "tct_****", "<ip>:51234", "capture-cdp"} {
		if !strings.Contains(text, kept) {
			t.Errorf("bundle lacks %q", kept)
		}
	}
	if !strings.Contains(files["bundle/doctor.txt"], "chromium") {
		t.Errorf("doctor.txt lacks the chromium check:\n%s", files["bundle/doctor.txt"])
	}
	manifest := files["bundle/MANIFEST.txt"]
	for _, want := range []string{"logs.txt: sdp lines 4", "config.yaml", "ip addresses"} {
		if !strings.Contains(manifest, want) {
			t.Errorf("MANIFEST.txt lacks %q:\n%s", want, manifest)
		}
	}
	// A second run refuses to replace the bundle.
	if code := realMain([]string{"support-bundle", "-o", out, "--config", cfgPath, "--logs", "0"}, &stdout, &stderr); code != 1 {
		t.Errorf("existing output: exit %d, want 1", code)
	}
	if code := realMain([]string{"support-bundle", "--logs", "x"}, &stdout, &stderr); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}

func TestSupportBundleBadConfig(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("video:\n  fps: 1000\nserver:\n  dataDir: "+dir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := supportJournal
	t.Cleanup(func() { supportJournal = old })
	supportJournal = []string{"no-such-journalctl-binary"}
	out := filepath.Join(dir, "b.tgz")
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"support-bundle", "-o", out, "--config", cfgPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	files := untar(t, out)
	if !strings.Contains(files["b/config.yaml"], "video.fps") {
		t.Errorf("config.yaml does not name the bad key:\n%s", files["b/config.yaml"])
	}
	if !strings.Contains(files["b/MANIFEST.txt"], "journal not included") {
		t.Errorf("MANIFEST.txt does not note the missing journal:\n%s", files["b/MANIFEST.txt"])
	}
}

func TestRedactor(t *testing.T) {
	for in, want := range map[string]string{
		"from 10.0.0.1.":                       "from <ip>.",
		"addr:10.0.0.1:443":                    "addr:<ip>:443",
		"listen 0.0.0.0:8443 and [::]:80":      "listen 0.0.0.0:8443 and [::]:80",
		"[fe80::1%eth0]:5":                     "[<ip>%eth0]:5",
		"Chromium 131.0.6778.85 go1.26.8":      "Chromium 131.0.6778.85 go1.26.8",
		"at 13:23:45 mac aa:bb:cc:dd:ee:ff":    "at 13:23:45 mac aa:bb:cc:dd:ee:ff",
		"fp AB:CD:EF:01:23:45:67:89:AB:CD":     "fp AB:CD:EF:01:23:45:67:89:AB:CD",
		"::ffff:192.0.2.1 and ::1":             "<ip> and ::1",
		"tokenFile: /var/lib/tabcast/x":        "tokenFile: /var/lib/tabcast/x",
		`{"password":"pw1","secretFile":"/a"}`: `{"password":"****","secretFile":"/a"}`,
		"info agent token: not created yet":    "info agent token: not created yet",
		"  - apiKey: k3y":                      "  - apiKey: ****",
		"credentialTTL: 10m":                   "credentialTTL: 10m",
		"Authorization: bearer tct_abc":        "Authorization: bearer ****",
	} {
		if got := newRedactor().redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
