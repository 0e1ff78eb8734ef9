package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/netns"
	"github.com/tabcast/tabcast/test/viewer"
)

// tcviewerBin builds the command-line viewer: a viewer that runs inside a
// network namespace.
func tcviewerBin(t *testing.T) string {
	t.Helper()
	bin, err := viewer.BuildCLI(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startOnNetns starts an appliance serving HTTPS on the host end of ns's
// veth (a viewer in ns reaches it as on a LAN) and waits for its default
// session.
func startOnNetns(ctx context.Context, t *testing.T, ns *netns.NS, sets ...string) (*harness.Appliance, harness.SessionSnapshot) {
	t.Helper()
	a, s, err := harness.StartOnLAN(ctx, t.TempDir(), ns.HostIP, sets...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(10 * time.Second) })
	return a, s
}

// watchFromNetns runs tcviewer inside ns on a's session s (VP8, trusting
// a's certificate) with extra flags, and decodes its result.
func watchFromNetns(ctx context.Context, t *testing.T, ns *netns.NS, bin string, a *harness.Appliance, s harness.SessionSnapshot, extra ...string) (viewer.Result, error) {
	t.Helper()
	out, err := ns.Exec(ctx, bin, append(a.ViewerArgs(s.ID), extra...)...).Output()
	r, jerr := viewer.DecodeCLI(out)
	if jerr != nil && err == nil {
		err = jerr
	}
	if ee, ok := err.(*exec.ExitError); ok {
		t.Logf("tcviewer stderr: %s", ee.Stderr)
	}
	return r, err
}
