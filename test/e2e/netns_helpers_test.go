package e2e

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/netns"
	"github.com/tabcast/tabcast/test/viewer"
)

// tcviewerBin builds the command-line viewer (go's build cache makes the
// second build cheap): a viewer that runs inside a network namespace.
func tcviewerBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tcviewer")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tabcast/tabcast/test/viewer/cmd/tcviewer").CombinedOutput(); err != nil {
		t.Fatalf("build tcviewer: %v\n%s", err, out)
	}
	return bin
}

// startOnNetns starts an appliance serving HTTPS on the host end of ns's
// veth (a viewer in ns reaches it as on a LAN) and waits for its default
// session.
func startOnNetns(ctx context.Context, t *testing.T, ns *netns.NS, sets ...string) (*harness.Appliance, harness.SessionSnapshot) {
	t.Helper()
	a, err := harness.StartWith(ctx, t.TempDir(), harness.Options{Listen: net.JoinHostPort(ns.HostIP, "0")}, append([]string{"server.tls=on"}, sets...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(10 * time.Second) })
	s, err := a.DefaultSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return a, s
}

// watchFromNetns runs tcviewer inside ns on a's session s (VP8, trusting
// a's certificate) with extra flags, and decodes its result.
func watchFromNetns(ctx context.Context, t *testing.T, ns *netns.NS, bin string, a *harness.Appliance, s harness.SessionSnapshot, extra ...string) (viewer.Result, error) {
	t.Helper()
	args := append([]string{"--url", a.URL, "--token", a.Token, "--session", s.ID, "--codec", "vp8",
		"--ca-file", filepath.Join(a.DataDir, "tls-cert.pem")}, extra...)
	out, err := ns.Exec(ctx, bin, args...).Output()
	var r viewer.Result
	if jerr := json.Unmarshal(out, &r); jerr != nil && err == nil {
		err = jerr
	}
	if ee, ok := err.(*exec.ExitError); ok {
		t.Logf("tcviewer stderr: %s", ee.Stderr)
	}
	return r, err
}
