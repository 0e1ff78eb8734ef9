package relay

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/plugintest"
	turnapi "github.com/tabcast/tabcast/plugins/turn"
)

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// TestThroughPluginProcess builds the real turnd binary and drives it the
// way the core does (go-plugin, gRPC, AutoMTLS), then uses the minted
// credential with a pion TURN client.
func TestThroughPluginProcess(t *testing.T) {
	leakCheck(t)
	echo := listenUDP(t, true)
	raw, client := plugintest.Dispense(t, "github.com/tabcast/tabcast/turnd", plugins.KindTurn, turnapi.PluginSets(nil))
	defer client.Kill()
	tp, ok := raw.(*turnapi.Client)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	info, err := tp.Info(ctx)
	if err != nil || info.Name != Name || info.Kind != plugins.KindTurn || info.APIVersion != 1 {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if err := tp.SetConfig(ctx, []byte(`{"relayAdress": "127.0.0.1"}`)); err == nil {
		t.Fatal("typo accepted")
	} else if ce, ok := base.AsConfigError(err); !ok || ce.Key != "relayAdress" {
		t.Fatalf("typo: %v, want a ConfigError naming relayAdress", err)
	}

	cfg := testConfig(t)
	port := freeUDPPort(t)
	cfg["listenUDP"] = fmt.Sprintf("127.0.0.1:%d", port)
	cfg["selfAddresses"] = []string{"127.0.0.1"}
	cfg["selfPorts"] = []int{echo.port()}
	cfg["advertisedHosts"] = []string{"turn.example.test"}
	if err := tp.SetConfig(ctx, mustJSON(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.MintCredential(ctx, turnapi.Scope{User: "u", Session: "s", Peer: "p"}, 20*time.Minute); err == nil {
		t.Fatal("ttl 20m accepted")
	}
	scope := turnapi.Scope{User: "alice", Session: "s1", Peer: "peer-1", Generation: 0}
	cred, err := tp.MintCredential(ctx, scope, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("turn:turn.example.test:%d?transport=udp", port); len(cred.URLs) != 1 || cred.URLs[0] != want {
		t.Errorf("URLs %v, want [%s]", cred.URLs, want)
	}
	server := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	tc, err := allocate(t, server, cred.Username, cred.Password)
	defer tc.Close()
	if err != nil {
		t.Fatalf("Allocate with the minted credential: %v", err)
	}

	// Denied classes, counted by the plugin process.
	st0, _ := tp.Status(ctx)
	denied := []string{"::1", "0.0.0.0", "10.0.0.1", "192.168.1.1", "169.254.169.254", "fe80::1", "8.8.8.8"}
	for _, ip := range denied {
		if _, err := tc.relay.WriteTo([]byte("x"), &net.UDPAddr{IP: net.ParseIP(ip), Port: echo.port()}); err == nil {
			t.Errorf("permission to %s granted", ip)
		}
	}
	// The self port echoes through the relay.
	buf := make([]byte, 1500)
	var echoed bool
	for i := 0; i < 20 && !echoed; i++ {
		tc.relay.WriteTo([]byte("ping"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: echo.port()})
		tc.relay.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		n, _, err := tc.relay.ReadFrom(buf)
		echoed = err == nil && string(buf[:n]) == "ping"
	}
	if !echoed {
		t.Fatal("no echo through the plugin's relay")
	}
	st, err := tp.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PermissionDenies-st0.PermissionDenies != uint64(len(denied)) || st.AllocationsActive != 1 || st.RelayedPackets < 2 || st.CredentialsLive != 1 {
		t.Errorf("Status = %+v", st)
	}
	t.Logf("Status through the plugin: %+v", st)

	// Peer closes: the core revokes; the allocation ends and the credential
	// no longer allocates.
	rv, err := tp.Revoke(ctx, scope)
	if err != nil || rv.Credentials != 1 || rv.Allocations != 1 {
		t.Fatalf("Revoke = %+v, %v", rv, err)
	}
	eventually(t, "the allocation to close", func() bool {
		st, err := tp.Status(ctx)
		return err == nil && st.AllocationsActive == 0
	})
	tc2, err := allocate(t, server, cred.Username, cred.Password)
	tc2.Close()
	if code := turnCode(err); code != 400 {
		t.Errorf("allocate after revoke: %v, want 400", err)
	}

	if err := tp.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	client.Kill()
}
