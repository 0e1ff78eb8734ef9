package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// notifier speaks systemd's notify protocol (sd_notify(3)): one datagram
// per state change to $NOTIFY_SOCKET. Without that variable (not under
// systemd, or Type=simple) it is nil and every call does nothing.
type notifier struct {
	addr *net.UnixAddr
}

func newNotifier() *notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // an abstract socket
	}
	return &notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// send writes one state ("READY=1", "WATCHDOG=1", "STOPPING=1", ...).
func (n *notifier) send(state string) error {
	if n == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	return nil
}

// watchdogEvery is how often systemd wants a WATCHDOG=1 (half its
// WatchdogSec, as sd_watchdog_enabled(3) advises), or 0 when no watchdog
// is set for this process.
func watchdogEvery() time.Duration {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}

// watchdog feeds systemd's watchdog while check passes: a core whose HTTP
// server or session manager hangs stops feeding it, and systemd restarts
// the service (Restart=on-failure) after WatchdogSec. It returns when ctx
// ends; the caller owns the goroutine.
func watchdog(ctx context.Context, n *notifier, every time.Duration, check func(context.Context) error, log *slog.Logger) {
	if n == nil || every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		err := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Logged once per episode: a hung core would flood otherwise.
			if !failing {
				log.Warn("watchdog: liveness check failed; not feeding systemd's watchdog", "err", err)
			}
			failing = true
			continue
		}
		if failing {
			log.Info("watchdog: liveness check passes again")
		}
		failing = false
		if err := n.send("WATCHDOG=1"); err != nil {
			log.Debug("watchdog", "err", err)
		}
	}
}

// liveness is the watchdog's check: the HTTP server answers /healthz on its
// own listener (accept loop, handlers and TLS alive) and the session
// manager's lock is not stuck.
func (a *appliance) liveness(addr net.Addr, useTLS bool) func(context.Context) error {
	host := "127.0.0.1"
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		host = ta.IP.String()
	}
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(addr.(*net.TCPAddr).Port)) + "/healthz"
	client := &http.Client{Transport: &http.Transport{
		// Our own listener, over loopback or our own address; nothing
		// secret is sent and the certificate may be the self-signed one.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		DisableKeepAlives: true,
	}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("healthz: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: HTTP %d", resp.StatusCode)
		}
		if a.sessions == nil {
			return nil
		}
		// One List at a time: if the last one is still stuck, that is the
		// answer (and no goroutine piles up behind the lock).
		if !a.listing.CompareAndSwap(false, true) {
			return errors.New("session manager: no answer (lock held?)")
		}
		done := make(chan struct{})
		go func() { // ends when List returns
			defer a.listing.Store(false)
			defer close(done)
			a.sessions.List()
		}()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return errors.New("session manager: no answer (lock held?)")
		}
	}
}
