package harness

import (
	"context"
	"net"
	"path/filepath"
	"time"
)

// StartOnLAN starts an appliance serving HTTPS on hostIP (the host end of a
// network namespace's veth: a viewer in the namespace reaches it as on a
// LAN) and waits for its default session. The caller stops it.
func StartOnLAN(ctx context.Context, logDir, hostIP string, sets ...string) (*Appliance, SessionSnapshot, error) {
	a, err := StartWith(ctx, logDir, Options{Listen: net.JoinHostPort(hostIP, "0")}, append([]string{"server.tls=on"}, sets...)...)
	if err != nil {
		return nil, SessionSnapshot{}, err
	}
	s, err := a.DefaultSession(ctx)
	if err != nil {
		_ = a.Stop(10 * time.Second)
		return nil, SessionSnapshot{}, err
	}
	return a, s, nil
}

// ViewerArgs are tcviewer's flags for watching session id of a (VP8,
// trusting a's certificate).
func (a *Appliance) ViewerArgs(id string) []string {
	return []string{"--url", a.URL, "--token", a.Token, "--session", id, "--codec", "vp8",
		"--ca-file", filepath.Join(a.DataDir, "tls-cert.pem")}
}
