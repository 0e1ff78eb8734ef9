package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func updRun(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := realMain(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func writeRandom(t *testing.T, path string, size int, seed int64) {
	t.Helper()
	b := make([]byte, size)
	rand.New(rand.NewSource(seed)).Read(b[:size/2])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUpdateCLI runs keygen, pack, verify, apply and status through the
// command line, with files standing in for the partitions.
func TestUpdateCLI(t *testing.T) {
	d := t.TempDir()
	p := func(s string) string { return filepath.Join(d, s) }
	esp := p("esp")
	for _, dir := range []string{"esp/loader/entries", "esp/tabcast/a", "keys"} {
		if err := os.MkdirAll(p(dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(p("esp/loader/loader.conf"), []byte("default tabcast-*\n"), 0o644)
	os.WriteFile(p("esp/loader/entries/tabcast-0001-a.conf"), []byte("title Tabcast v1 (slot A)\nversion 0001-v1\nsort-key tabcast\n"+
		"linux /tabcast/a/vmlinuz\ninitrd /tabcast/a/initrd.img\noptions root=PARTUUID=aaaa rw tabcast.slot=a\n"), 0o644)
	writeRandom(t, p("root-a"), 6<<20, 1)
	writeRandom(t, p("root-b"), 6<<20, 2)
	writeRandom(t, p("rootfs.ext4"), 4<<20, 3)
	writeRandom(t, p("vmlinuz"), 32<<10, 4)
	writeRandom(t, p("initrd.img"), 32<<10, 5)

	code, out, errs := updRun("update", "keygen", "--out", p("keys"))
	if code != 0 || !strings.Contains(out, "update-signing.key (0600, SECRET") {
		t.Fatalf("keygen: %d %s %s", code, out, errs)
	}
	key, pub := p("keys/update-signing.key"), p("keys/update.pub")
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	secret, _ := os.ReadFile(key)
	if code, _, errs := updRun("update", "keygen", "--out", p("keys")); code != 1 || !strings.Contains(errs, "already exists") {
		t.Errorf("keygen over a key: %d %s", code, errs)
	}
	code, out, _ = updRun("update", "pubkey", "--key", key)
	if want, _ := os.ReadFile(pub); code != 0 || out != string(want) {
		t.Errorf("pubkey: %d %q, want %q", code, out, want)
	}

	bundle := p("tabcast-v2-amd64.tcupdate")
	code, out, errs = updRun("update", "pack", "--key", key, "--version", "v2", "--rootfs", p("rootfs.ext4"),
		"--kernel", p("vmlinuz"), "--initrd", p("initrd.img"), "--out", bundle)
	if code != 0 || !strings.Contains(out, "Wrote "+bundle+": tabcast v2") {
		t.Fatalf("pack: %d %s %s", code, out, errs)
	}
	for _, s := range []string{out, errs} {
		if lines := strings.Split(strings.TrimSpace(string(secret)), "\n"); strings.Contains(s, lines[len(lines)-1]) {
			t.Errorf("the signing key was printed")
		}
	}
	if code, _, errs := updRun("update", "pack", "--key", key); code != 2 || !strings.Contains(errs, "missing --version, --rootfs") {
		t.Errorf("pack without flags: %d %s", code, errs)
	}
	if code, out, errs := updRun("update", "verify", "--pubkey", pub, bundle); code != 0 || !strings.Contains(out, "every sha256 matches") {
		t.Errorf("verify: %d %s %s", code, out, errs)
	}

	// A key the appliance does not trust: refused, nothing written.
	os.MkdirAll(p("other"), 0o755)
	updRun("update", "keygen", "--out", p("other"))
	sumB := fileDigest(t, p("root-b"))
	apply := func(pubkey string, extra ...string) (int, string, string) {
		return updRun(append([]string{"update", "apply", "--pubkey", pubkey, "--esp", esp, "--slot-a", p("root-a"), "--slot-b", p("root-b"),
			"--current", "a", "--slot-b-partuuid", "BBBB-UUID"}, extra...)...)
	}
	code, _, errs = apply(p("other/update.pub"), bundle)
	if code != 1 || !strings.Contains(errs, "tabcast update apply: the bundle's signature does not verify with any trusted key (1 trusted); nothing was written") {
		t.Errorf("untrusted: %d %s", code, errs)
	}
	if fileDigest(t, p("root-b")) != sumB {
		t.Errorf("a refused bundle wrote slot b")
	}
	if code, _, _ := apply(pub); code != 2 {
		t.Errorf("apply without FILE: %d", code)
	}

	sumA := fileDigest(t, p("root-a"))
	code, out, errs = apply(pub, bundle)
	if code != 0 || !strings.Contains(out, "Slot b now holds tabcast v2; the next boot starts it (entry tabcast-0002-b+1.conf, 1 try).") {
		t.Fatalf("apply: %d %s %s", code, out, errs)
	}
	if fileDigest(t, p("root-a")) != sumA {
		t.Errorf("slot a written")
	}
	entry, err := os.ReadFile(p("esp/loader/entries/tabcast-0002-b+1.conf"))
	if err != nil || !strings.Contains(string(entry), "options    root=PARTUUID=bbbb-uuid rw tabcast.slot=b panic=30\n") {
		t.Errorf("entry: %s %v", entry, err)
	}

	code, out, _ = updRun("update", "status", "--esp", esp, "--current", "a")
	for _, s := range []string{"running slot: a", "slot a: tabcast v1, entry tabcast-0001-a.conf: good",
		"slot b: tabcast v2, entry tabcast-0002-b+1.conf: new, not booted yet (1 try)", "next boot: slot b (tabcast-0002-b+1.conf)"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("status lacks %q:\n%s", s, out)
		}
	}
	// The try failed: systemd-boot goes back to slot a.
	os.Rename(p("esp/loader/entries/tabcast-0002-b+1.conf"), p("esp/loader/entries/tabcast-0002-b+0-1.conf"))
	code, out, _ = updRun("update", "status", "--esp", esp, "--current", "a", "--json")
	if code != 0 || !strings.Contains(out, `"next": "tabcast-0001-a.conf"`) || !strings.Contains(out, `"Bad": true`) {
		t.Errorf("status --json after rollback:\n%s", out)
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:64]) + string(b[len(b)/2:len(b)/2+64]) + string(rune(len(b)))
}

func TestUpdateWaitReady(t *testing.T) {
	old := readyPollEvery
	readyPollEvery = 20 * time.Millisecond
	t.Cleanup(func() { readyPollEvery = old })

	var calls atomic.Int32
	var readyAfter atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= readyAfter.Load() {
			http.Error(w, `{"code":"not_ready"}`, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	dataDir := t.TempDir()
	cfgFlags := []string{"--set", "server.listen=" + addr, "--set", "server.dataDir=" + dataDir}

	readyAfter.Store(2)
	code, out, errs := updRun(append([]string{"update", "wait-ready", "--timeout", "5s"}, cfgFlags...)...)
	if code != 0 || !strings.Contains(out, "ready: http://"+addr+"/readyz answered 200") || calls.Load() != 3 {
		t.Errorf("wait-ready: %d calls=%d %s %s", code, calls.Load(), out, errs)
	}

	readyAfter.Store(1 << 30)
	code, _, errs = updRun(append([]string{"update", "wait-ready", "--timeout", "100ms"}, cfgFlags...)...)
	if code != 1 || !strings.Contains(errs, "not ready after 100ms: HTTP 503") {
		t.Errorf("wait-ready timeout: %d %s", code, errs)
	}

	// --fail-only-with-fallback: no other slot to go back to → warn, 0;
	// slot a to go back to → 1.
	esp := t.TempDir()
	os.MkdirAll(filepath.Join(esp, "loader/entries"), 0o755)
	os.WriteFile(filepath.Join(esp, "loader/entries/tabcast-0002-b+0-1.conf"), []byte("version 0002-v2\nsort-key tabcast\n"), 0o644)
	fb := append([]string{"update", "wait-ready", "--timeout", "50ms", "--fail-only-with-fallback", "--esp", esp, "--current", "b"}, cfgFlags...)
	if code, _, errs := updRun(fb...); code != 0 || !strings.Contains(errs, "no other slot to fall back to") {
		t.Errorf("without a fallback: %d %s", code, errs)
	}
	os.WriteFile(filepath.Join(esp, "loader/entries/tabcast-0001-a.conf"), []byte("version 0001-v1\nsort-key tabcast\n"), 0o644)
	if code, _, errs := updRun(fb...); code != 1 || !strings.Contains(errs, "failing the boot: systemd-boot falls back to tabcast-0001-a.conf") {
		t.Errorf("with a fallback: %d %s", code, errs)
	}

	// HTTPS: only the appliance's own certificate is trusted.
	tsrv := httptest.NewTLSServer(handler)
	defer tsrv.Close()
	certFile := filepath.Join(dataDir, "cert.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tsrv.Certificate().Raw}), 0o644)
	tlsFlags := []string{"--set", "server.listen=" + tsrv.Listener.Addr().String(), "--set", "server.dataDir=" + dataDir,
		"--set", "server.tls=on", "--set", "server.certFile=" + certFile, "--set", "server.keyFile=" + filepath.Join(dataDir, "key.pem")}
	readyAfter.Store(0)
	calls.Store(0)
	if code, out, errs := updRun(append([]string{"update", "wait-ready", "--timeout", "5s"}, tlsFlags...)...); code != 0 || !strings.Contains(out, "ready: https://") {
		t.Errorf("https: %d %s %s", code, out, errs)
	}
	// Another certificate (httptest's servers all share one).
	k, _ := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	der, err := x509.CreateCertificate(crand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(time.Hour)},
		&x509.Certificate{SerialNumber: big.NewInt(1)}, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	if code, _, errs := updRun(append([]string{"update", "wait-ready", "--timeout", "100ms"}, tlsFlags...)...); code != 1 || !strings.Contains(errs, "not the appliance's own") {
		t.Errorf("https, wrong certificate: %d %s", code, errs)
	}
}

func TestUpdateUsage(t *testing.T) {
	if code, _, errs := updRun("update"); code != 2 || !strings.Contains(errs, "usage: tabcast update") {
		t.Errorf("update: %d %s", code, errs)
	}
	if code, out, _ := updRun("update", "--help"); code != 0 || !strings.Contains(out, "wait-ready") {
		t.Errorf("update --help: %d", code)
	}
	if code, _, errs := updRun("update", "frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("unknown: %d %s", code, errs)
	}
	if code, _, _ := updRun("update", "apply", "--nope", "x"); code != 2 {
		t.Errorf("bad flag: %d", code)
	}
	if code, _, _ := updRun("update", "keygen"); code != 2 {
		t.Errorf("keygen without --out: %d", code)
	}
	if code, out, _ := updRun("--help"); code != 0 || !strings.Contains(out, "tabcast update apply|status") {
		t.Errorf("usage lacks update")
	}
}
