package viewer_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/test/netns"
	"github.com/tabcast/tabcast/test/viewer"
)

func watch(t *testing.T, o viewer.Options) viewer.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if o.SessionID == "" {
		o.SessionID = "s1"
	}
	if o.For == 0 {
		o.For = 500 * time.Millisecond
	}
	r, err := viewer.Watch(ctx, o)
	if err != nil {
		t.Fatalf("Watch: %v (result %+v)", err, r)
	}
	if r.Frames == 0 || r.Codec != "vp8" {
		t.Fatalf("no video: %+v", r)
	}
	return r
}

func TestWatchLoopbackHostPair(t *testing.T) {
	f := startFake(t, "127.0.0.1", []string{"lo"}, nil)
	r := watch(t, viewer.Options{BaseURL: f.URL, Codec: "vp8", Interfaces: []string{"lo"}})
	if r.LocalCandidateType != "host" || r.RemoteCandidateType != "host" || r.RelayProtocol != "" || r.LocalProtocol != "udp" {
		t.Fatalf("pair: %+v", r)
	}
	if !strings.HasPrefix(r.LocalAddress, "127.0.0.1:") || !strings.HasPrefix(r.RemoteAddress, "127.0.0.1:") {
		t.Fatalf("addresses: %+v", r)
	}
	if r.WelcomeICEServers != 0 {
		t.Fatalf("welcome servers: %+v", r)
	}
}

func TestWatchRelayTCP(t *testing.T) {
	ts := startTURN(t, "127.0.0.1")
	t.Run("options", func(t *testing.T) {
		f := startFake(t, "127.0.0.1", []string{"lo"}, nil)
		r := watch(t, viewer.Options{BaseURL: f.URL, Codec: "vp8", Interfaces: []string{"lo"}, ICETransportPolicy: "relay",
			ICEServers: []webrtc.ICEServer{{URLs: []string{ts.URL}, Username: ts.User, Credential: ts.Password}}})
		if r.LocalCandidateType != "relay" || r.RelayProtocol != "tcp" {
			t.Fatalf("want a relay over tcp: %+v", r)
		}
	})
	t.Run("welcome", func(t *testing.T) {
		// urls as a list, then as a single string (both are RTCIceServer forms).
		for _, urls := range []any{[]string{ts.URL}, ts.URL} {
			f := startFake(t, "127.0.0.1", []string{"lo"}, []map[string]any{{"urls": urls, "username": ts.User, "credential": ts.Password}})
			r := watch(t, viewer.Options{BaseURL: f.URL, Codec: "vp8", Interfaces: []string{"lo"}, ICETransportPolicy: "relay"})
			if r.LocalCandidateType != "relay" || r.RelayProtocol != "tcp" || r.WelcomeICEServers != 1 {
				t.Fatalf("want a relay over tcp from the welcome's server: %+v", r)
			}
		}
	})
	t.Run("relay without servers fails", func(t *testing.T) {
		f := startFake(t, "127.0.0.1", []string{"lo"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if r, err := viewer.Watch(ctx, viewer.Options{BaseURL: f.URL, SessionID: "s1", Codec: "vp8", Interfaces: []string{"lo"}, ICETransportPolicy: "relay"}); err == nil {
			t.Fatalf("relay-only with no TURN server got video: %+v", r)
		}
	})
}

func TestWatchBadOptions(t *testing.T) {
	if _, err := viewer.Watch(context.Background(), viewer.Options{BaseURL: "http://127.0.0.1:1", ICETransportPolicy: "nohost"}); err == nil ||
		!strings.Contains(err.Error(), "ICETransportPolicy") {
		t.Fatalf("bad policy: %v", err)
	}
	f := startFake(t, "127.0.0.1", []string{"lo"}, []map[string]any{{"urls": []string{"bogus:x"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := viewer.Watch(ctx, viewer.Options{BaseURL: f.URL, SessionID: "s1", Codec: "vp8", Interfaces: []string{"lo"}}); err == nil ||
		!strings.Contains(err.Error(), "welcome") {
		t.Fatalf("bad welcome ice server: %v", err)
	}
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// tcviewerBinary builds cmd/tcviewer once per test binary.
func tcviewerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tcviewer-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin, buildErr = viewer.BuildCLI(context.Background(), dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildBin != "" {
		os.RemoveAll(filepath.Dir(buildBin))
	}
	os.Exit(code)
}

func TestTCViewerUsage(t *testing.T) {
	bin := tcviewerBinary(t)
	for _, args := range [][]string{{"--no-such-flag"}, {}, {"--url", "http://127.0.0.1:1"}, {"--for", "soon"}} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("%v: want exit 2, got %v", args, err)
		}
		if !strings.Contains(stderr.String(), "usage: tcviewer") || !strings.Contains(stderr.String(), "-relay-only") || stdout.Len() != 0 {
			t.Fatalf("%v: stdout %q stderr %q", args, stdout.String(), stderr.String())
		}
	}
	// A failure: exit 1, the error on stderr.
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--url", "http://127.0.0.1:1", "--session", "s1", "--timeout", "2s", "--for", "0s")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "dial signaling") {
		t.Fatalf("unreachable appliance: %v stderr %q", err, stderr.String())
	}
	var r viewer.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("stdout is not a Result: %q: %v", out, err)
	}
}

func runTCViewer(t *testing.T, ns *netns.NS, args ...string) viewer.Result {
	t.Helper()
	bin := tcviewerBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := ns.Exec(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tcviewer in %s: %v\nstdout: %s\nstderr: %s", ns.Name, err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r viewer.Result
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r) != nil {
		t.Fatalf("tcviewer stdout is not one JSON line: %q", stdout.String())
	}
	if r.Frames == 0 {
		t.Fatalf("no frames: %+v", r)
	}
	return r
}

// TestTCViewerInNamespace runs tcviewer in a namespace against a fake
// appliance on the host end of the veth: first directly (host pair), then
// with UDP blocked in the namespace, relay-only through TURN over TCP, over
// HTTPS trusting --ca-file.
func TestTCViewerInNamespace(t *testing.T) {
	ns := netns.Create(t, "tcviewer")

	t.Run("direct", func(t *testing.T) {
		f := startFake(t, ns.HostIP, []string{ns.HostIf}, nil)
		r := runTCViewer(t, ns, "--url", f.URL, "--session", "s1", "--codec", "vp8", "--for", "500ms")
		if r.LocalCandidateType != "host" || r.RemoteCandidateType != "host" ||
			!strings.HasPrefix(r.LocalAddress, ns.NSIP+":") || !strings.HasPrefix(r.RemoteAddress, ns.HostIP+":") {
			t.Fatalf("pair: %+v", r)
		}
	})

	t.Run("udp blocked, turn over tcp, https", func(t *testing.T) {
		ns.BlockUDP(t)
		cert := newTLS(t, ns.HostIP)
		f := startFake(t, ns.HostIP, []string{ns.HostIf}, nil, cert)
		ts := startTURN(t, ns.HostIP)
		r := runTCViewer(t, ns, "--url", f.URL, "--session", "s1", "--codec", "vp8", "--for", "500ms",
			"--ca-file", cert.pemFile, "--relay-only", "--ice-server", ts.URL, "--ice-user", ts.User, "--ice-pass", ts.Password)
		if r.LocalCandidateType != "relay" || r.RelayProtocol != "tcp" || r.RemoteCandidateType != "host" ||
			!strings.HasPrefix(r.LocalAddress, ns.HostIP+":") {
			t.Fatalf("pair: %+v", r)
		}
	})
}

type httptestTLS struct {
	config  *tls.Config
	pemFile string
}

// newTLS makes a self-signed certificate for ip and writes it as PEM.
func newTLS(t *testing.T, ip string) *httptestTLS {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tabcast test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &httptestTLS{
		config:  &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12},
		pemFile: p,
	}
}
