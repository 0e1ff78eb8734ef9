package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

func TestBadConfig(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	for _, c := range []struct {
		key   string
		patch string
	}{
		{"listenUPD", `{"listenUPD": ":3478"}`},
		{"selfPorts", `{"selfPorts": "3478"}`},
		{"listenUDP", `{"listenUDP": "nonsense"}`},
		{"listenUDP", `{"listenUDP": "", "listenTCP": ""}`},
		{"listenTCP", `{"listenTCP": "example.com:3478"}`},
		{"listenTLS", `{"listenTLS": ":99999"}`},
		{"certFile", `{"listenTLS": ":5349"}`},
		{"keyFile", `{"listenTLS": ":5349", "certFile": "/x.pem"}`},
		{"realm", `{"realm": ""}`},
		{"realm", `{"realm": "a\"b"}`},
		{"relayAddress", `{"relayAddress": "::1"}`},
		{"relayAddress", `{"relayAddress": "0.0.0.0"}`},
		{"relayAddress", `{"relayAddress": "relay.example"}`},
		{"relayPortMin", `{"relayPortMin": 80}`},
		{"relayPortMax", `{"relayPortMin": 50000, "relayPortMax": 49999}`},
		{"secretFile", `{"secretFile": ""}`},
		{"previousSecretFile", `{"secretFile": "/a", "previousSecretFile": "/a"}`},
		{"advertisedHosts", `{"advertisedHosts": ["turn.example/x"]}`},
		{"selfAddresses", `{"selfAddresses": ["host.lan"], "selfPorts": [8443]}`},
		{"selfAddresses", `{"selfAddresses": ["0.0.0.0"], "selfPorts": [8443]}`},
		{"selfPorts", `{"selfAddresses": ["192.168.1.2"]}`},
		{"selfPorts", `{"selfAddresses": ["192.168.1.2"], "selfPorts": [0]}`},
		{"selfPorts", `{"listenUDP": "127.0.0.1:3478", "selfAddresses": ["192.168.1.2"], "selfPorts": [3478]}`},
		{"selfPorts", `{"selfAddresses": ["192.168.1.2"], "selfPorts": [49170], "relayPortMin": 49160, "relayPortMax": 49200}`},
		{"allowPeers", `{"allowPeers": ["0.0.0.0/0"]}`},
		{"allowPeers", `{"allowPeers": ["10.0.0.0/16"]}`},
		{"allowPeers", `{"allowPeers": ["169.254.169.254:80"]}`},
		{"allowPeers", `{"allowPeers": ["8.8.8.8"]}`},
		{"maxAllocationsPerUser", `{"maxAllocationsPerUser": 0}`},
		{"maxAllocations", `{"maxAllocations": 0}`},
		{"maxAllocations", `{"maxAllocations": 100, "relayPortMin": 50000, "relayPortMax": 50010}`},
		{"relayKbpsPerAllocation", `{"relayKbpsPerAllocation": 1}`},
		{"relayKbpsTotal", `{"relayKbpsPerAllocation": 1000, "relayKbpsTotal": 500}`},
		{"allocationLifetime", `{"allocationLifetime": "forever"}`},
		{"allocationLifetime", `{"allocationLifetime": "2h"}`},
		{"socketBuffer", `{"socketBuffer": 1024}`},
		{"certFile", `{"listenTLS": "127.0.0.1:0", "certFile": "/nonexistent.pem", "keyFile": "/nonexistent.key"}`},
	} {
		cfg := testConfig(t)
		cfg["secretFile"] = filepath.Join(dir, "secret")
		var patch map[string]any
		if err := json.Unmarshal([]byte(c.patch), &patch); err != nil {
			t.Fatal(err)
		}
		for k, v := range patch {
			cfg[k] = v
		}
		p := New(nil)
		err := p.SetConfig(context.Background(), mustJSON(t, cfg))
		p.Shutdown(context.Background())
		ce, ok := base.AsConfigError(err)
		if !ok || ce.Key != c.key {
			t.Errorf("%s: got %v, want a ConfigError for %q", c.patch, err, c.key)
			continue
		}
		t.Logf("%s -> %v", c.patch, err)
	}

	// A previous secret file that does not exist is refused.
	cfg := testConfig(t)
	cfg["previousSecretFile"] = filepath.Join(dir, "missing")
	p := New(nil)
	defer p.Shutdown(context.Background())
	if ce, ok := base.AsConfigError(p.SetConfig(context.Background(), mustJSON(t, cfg))); !ok || ce.Key != "previousSecretFile" {
		t.Errorf("missing previous secret: %v", ce)
	}
	// A weak secret file is refused.
	weak := filepath.Join(dir, "weak")
	os.WriteFile(weak, []byte("hunter2\n"), 0o600)
	cfg = testConfig(t)
	cfg["secretFile"] = weak
	if ce, ok := base.AsConfigError(p.SetConfig(context.Background(), mustJSON(t, cfg))); !ok || ce.Key != "secretFile" {
		t.Errorf("weak secret: %v", ce)
	}
	// The defaults are valid apart from the host-specific parts.
	var def Config
	sc, _ := p.ConfigSchema(context.Background())
	if err := json.Unmarshal(sc.DefaultsJSON, &def); err != nil || def.ListenUDP != ":3478" || def.RelayAddress != "" || def.MaxAllocationsPerUser != 5 {
		t.Errorf("defaults %+v, %v", def, err)
	}
	if !json.Valid(sc.JSONSchema) {
		t.Error("schema is not JSON")
	}
}

func writeCert(t *testing.T, certFile, keyFile, cn string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// TestTLSCertReload: the turns: listener serves the certificate files and
// picks up new ones without a restart.
func TestTLSCertReload(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writeCert(t, certFile, keyFile, "first")
	cfg := testConfig(t)
	cfg["listenTLS"], cfg["certFile"], cfg["keyFile"] = "127.0.0.1:0", certFile, keyFile
	p := startPlugin(t, cfg)
	p.mu.Lock()
	addr := p.inst.tls.Addr().String()
	p.mu.Unlock()
	cred := mint(t, p, "a", "p")
	if len(cred.URLs) != 2 || cred.URLs[1] != "turns:"+addr+"?transport=tcp" {
		t.Errorf("URLs = %v", cred.URLs)
	}
	cn := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := cn(); got != "first" {
		t.Fatalf("CN %q", got)
	}
	writeCert(t, certFile, keyFile, "second")
	future := time.Now().Add(2 * time.Second)
	os.Chtimes(certFile, future, future) // a distinct mtime even on coarse clocks
	time.Sleep(1100 * time.Millisecond)
	if got := cn(); got != "second" {
		t.Fatalf("after renewal CN %q, want second", got)
	}
}
