package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/httpapi"
	"github.com/tabcast/tabcast/core/signaling"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins/turn"
)

// selfAddresses are the appliance's own media addresses: what the relay may
// reach. With relayOnly the appliance gathers only loopback candidates, so
// the relay (on the same box) is the one way in.
func selfAddresses(cfg *config.Config) ([]string, error) {
	if cfg.WebRTC.RelayOnly {
		return []string{"127.0.0.1"}, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if len(cfg.WebRTC.Interfaces) > 0 && !slices.Contains(cfg.WebRTC.Interfaces, ifc.Name) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLinkLocalUnicast() {
				out = append(out, ipn.IP.String())
			}
		}
	}
	out = append(out, cfg.WebRTC.Advertise...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// relayConfig is the relay plugin's config: its subtree plus what the
// appliance knows (its own addresses and media port, its certificate), so
// that those are the only peers it may relay to unless set explicitly.
func relayConfig(cfg *config.Config) ([]byte, error) {
	name := cfg.Turn.Plugin
	raw, err := cfg.PluginConfigJSON(name)
	if err != nil {
		return nil, err
	}
	conf := map[string]any{}
	if err := json.Unmarshal(raw, &conf); err != nil {
		return nil, fmt.Errorf("plugins.config.%s: %w", name, err)
	}
	if _, set := conf["selfAddresses"]; !set {
		self, err := selfAddresses(cfg)
		if err != nil {
			return nil, err
		}
		conf["selfAddresses"] = self
	}
	if _, set := conf["selfPorts"]; !set {
		conf["selfPorts"] = []int{cfg.WebRTC.UDPPort}
	}
	// TURN over TLS uses the appliance's own certificate (the relay re-reads
	// it when it changes) unless the relay has one of its own.
	if tlsOn, _ := conf["listenTLS"].(string); tlsOn != "" {
		if _, set := conf["certFile"]; !set {
			certFile, keyFile := cfg.Server.CertFile, cfg.Server.KeyFile
			if certFile == "" {
				certFile, keyFile = filepath.Join(cfg.Server.DataDir, "tls-cert.pem"), filepath.Join(cfg.Server.DataDir, "tls-key.pem")
			}
			conf["certFile"], conf["keyFile"] = certFile, keyFile
		}
	}
	if cfg.WebRTC.RelayOnly {
		if _, set := conf["relayAddress"]; !set {
			// The relay's own address: the viewer's way in.
			if self, _ := selfAddressesLAN(cfg); len(self) > 0 {
				conf["relayAddress"] = self[0]
			}
		}
	}
	return json.Marshal(conf)
}

// selfAddressesLAN are the appliance's non-loopback IPv4 addresses.
func selfAddressesLAN(cfg *config.Config) ([]string, error) {
	c := *cfg
	c.WebRTC.RelayOnly = false
	all, err := selfAddresses(&c)
	var v4 []string
	for _, a := range all {
		if ip := net.ParseIP(a); ip != nil && ip.To4() != nil {
			v4 = append(v4, a)
		}
	}
	return v4, err
}

// iceServers mints a TURN credential per peer for signaling, scoped to the
// viewer, session, peer and its generation; revoke ends it when the peer
// goes (not only at expiry).
func iceServers(h *supervisor.Handle, ttl time.Duration) func(ctx context.Context, v signaling.Viewer, sessionID, peerID string, gen uint64) ([]signaling.ICEServer, func(), error) {
	relay := supervisor.Dispense[turn.Relay](h)
	return func(ctx context.Context, v signaling.Viewer, sessionID, peerID string, gen uint64) ([]signaling.ICEServer, func(), error) {
		r, _, err := relay.Get(ctx)
		if err != nil {
			return nil, nil, err
		}
		scope := turn.Scope{User: v.Name, Session: sessionID, Peer: peerID, Generation: int(gen % (1 << 31))}
		cred, err := r.MintCredential(ctx, scope, ttl)
		if err != nil {
			return nil, nil, err
		}
		revoke := func() {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if r, _, err := relay.Get(rctx); err == nil {
				_, _ = r.Revoke(rctx, scope)
			}
		}
		return []signaling.ICEServer{{URLs: cred.URLs, Username: cred.Username, Credential: cred.Password}}, revoke, nil
	}
}

// relayMetrics are the relay's counters for /metrics (none when it does
// not answer within a second).
func relayMetrics(h *supervisor.Handle) func(ctx context.Context) []httpapi.Metric {
	relay := supervisor.Dispense[turn.Relay](h)
	return func(ctx context.Context) []httpapi.Metric {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, _, err := relay.Get(ctx)
		if err != nil {
			return nil
		}
		st, err := r.Status(ctx)
		if err != nil {
			return nil
		}
		return []httpapi.Metric{
			{Name: "tabcast_turn_allocations_active", Type: "gauge", Help: "TURN allocations open now.", Value: float64(st.AllocationsActive)},
			{Name: "tabcast_turn_allocations_total", Type: "counter", Help: "TURN allocations made.", Value: float64(st.AllocationsTotal)},
			{Name: "tabcast_turn_auth_failures_total", Type: "counter", Help: "TURN requests with refused credentials (unknown, expired, revoked, wrong HMAC).", Value: float64(st.AuthFailures)},
			{Name: "tabcast_turn_denies_total", Type: "counter", Help: "TURN permissions refused by the peer policy.", Value: float64(st.PermissionDenies)},
			{Name: "tabcast_turn_quota_rejects_total", Type: "counter", Help: "TURN allocations refused for a quota (486).", Value: float64(st.QuotaRejects)},
			{Name: "tabcast_turn_policy_drops_total", Type: "counter", Help: "Relayed datagrams dropped: not to or from the appliance's media port.", Value: float64(st.PolicyDrops)},
			{Name: "tabcast_turn_bandwidth_drops_total", Type: "counter", Help: "Relayed datagrams dropped over a bandwidth cap.", Value: float64(st.BandwidthDrops)},
			{Name: "tabcast_turn_relayed_bytes_total", Type: "counter", Help: "Bytes relayed.", Value: float64(st.RelayedBytes)},
			{Name: "tabcast_turn_credentials_live", Type: "gauge", Help: "TURN credentials minted and not yet expired or revoked.", Value: float64(st.CredentialsLive)},
		}
	}
}
