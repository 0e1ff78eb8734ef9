package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/pion/logging"
	pturn "github.com/pion/turn/v4"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/turn"
)

// turnChecks start the relay as `tabcast run` would, allocate through each
// of its listeners with a credential of its own, and check that it refuses
// to relay to a private address.
func turnChecks(ctx context.Context, cfg *config.Config, sup *supervisor.Supervisor, dir string) []check {
	if !cfg.Turn.Enabled {
		return []check{{Name: "turn", Status: "warn", Detail: "off (turn.enabled false): viewers need a direct path to UDP/TCP " + fmt.Sprint(cfg.WebRTC.UDPPort)}}
	}
	name := "plugin " + cfg.Turn.Plugin
	h, err := app.StartPlugin(ctx, sup, cfg, dir, plugins.RoleTurn)
	if err != nil {
		hint := "check plugins.config." + cfg.Turn.Plugin
		if strings.Contains(err.Error(), "address already in use") {
			hint = "its ports are taken: by a running tabcast (then this is fine) or another TURN server"
		}
		return []check{{Name: name, Status: "fail", Detail: err.Error(), Hint: hint}}
	}
	out := []check{pluginCheck(ctx, h, dir+"/"+cfg.Turn.Plugin)}
	r, _, err := supervisor.Dispense[turn.Relay](h).Get(ctx)
	if err != nil {
		return out
	}
	scope := turn.Scope{User: "doctor", Session: "doctor", Peer: "doctor", Generation: 1}
	cred, err := r.MintCredential(ctx, scope, time.Minute)
	if err != nil {
		return append(out, check{Name: "turn credential", Status: "fail", Detail: err.Error()})
	}
	defer func() { _, _ = r.Revoke(context.WithoutCancel(ctx), scope) }()
	for _, u := range cred.URLs {
		out = append(out, turnSelfTest(ctx, u, cred))
	}
	return out
}

// turnSelfTest allocates through one TURN URL and asks it to relay to a
// private address, which it must refuse.
func turnSelfTest(ctx context.Context, rawURL string, cred turn.Credential) check {
	name := "turn " + rawURL
	u, err := url.Parse(strings.Replace(rawURL, ":", "://", 1))
	if err != nil {
		return check{Name: name, Status: "fail", Detail: "bad URL: " + err.Error()}
	}
	transport := u.Query().Get("transport")
	start := time.Now()
	var conn net.PacketConn
	switch {
	case u.Scheme == "turns":
		tc, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", u.Host) //nolint:gosec // a self-test of our own listener
		if err != nil {
			return check{Name: name, Status: "fail", Detail: err.Error(), Hint: "is the TLS listener's port open?"}
		}
		conn = pturn.NewSTUNConn(tc)
	case transport == "tcp":
		tc, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return check{Name: name, Status: "fail", Detail: err.Error()}
		}
		conn = pturn.NewSTUNConn(tc)
	default:
		pc, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return check{Name: name, Status: "fail", Detail: err.Error()}
		}
		conn = pc
	}
	defer conn.Close()
	client, err := pturn.NewClient(&pturn.ClientConfig{
		STUNServerAddr: u.Host, TURNServerAddr: u.Host, Conn: conn, Username: cred.Username, Password: cred.Password,
		Realm: "tabcast", LoggerFactory: quietLogs{}, RTO: 200 * time.Millisecond,
	})
	if err != nil {
		return check{Name: name, Status: "fail", Detail: err.Error()}
	}
	defer client.Close()
	if err := client.Listen(); err != nil {
		return check{Name: name, Status: "fail", Detail: err.Error()}
	}
	relay, err := client.Allocate()
	if err != nil {
		return check{Name: name, Status: "fail", Detail: "allocation refused: " + err.Error(), Hint: "see the turnd lines of the log"}
	}
	defer relay.Close()
	took := time.Since(start).Round(time.Millisecond)
	// The relay must not reach anything but the appliance.
	if _, err := relay.WriteTo([]byte("tabcast doctor"), &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 9}); err == nil {
		return check{Name: name, Status: "fail", Detail: "the relay accepted a permission for 10.0.0.1", Hint: "check plugins.config.turnd.allowPeers"}
	}
	return check{Name: name, Status: "ok", Detail: fmt.Sprintf("allocates in %v; a relay to 10.0.0.1 is refused", took)}
}

// quietLogs drops the TURN client's own logging.
type quietLogs struct{}

func (quietLogs) NewLogger(string) logging.LeveledLogger {
	return logging.NewDefaultLeveledLoggerForScope("", logging.LogLevelDisabled, nil)
}
