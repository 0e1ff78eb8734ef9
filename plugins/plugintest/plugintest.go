// Package plugintest starts a real plugin binary the way the core does
// (go-plugin, gRPC, AutoMTLS) for plugin authors' tests.
package plugintest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
)

// Dispense builds the plugin main package pkg (an import path), starts it
// and returns the dispensed client of kind (e.g. *capture.Client) and the
// go-plugin client; Kill it (deferred) before any goroutine-leak check.
// versioned is the kind's plugin sets, e.g. capture.PluginSets(nil).
func Dispense(t testing.TB, pkg, kind string, versioned map[int]plugin.PluginSet) (any, *plugin.Client) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(goBin, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake,
		VersionedPlugins: versioned,
		Cmd:              exec.Command(bin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.NewNullLogger(),
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		t.Fatalf("start %s: %v", pkg, err)
	}
	raw, err := rpc.Dispense(kind)
	if err != nil {
		client.Kill()
		t.Fatalf("dispense %s: %v", kind, err)
	}
	return raw, client
}
