package browser

import (
	"fmt"
	"os"
	"strings"
)

// baseDisabledFeatures are always disabled; ExtraFlags may add more.
var baseDisabledFeatures = []string{"Translate", "MediaRouter"}

// proxyBypassNone removes Chromium's implicit bypass of loopback, so that
// a page's requests to 127.0.0.1 and localhost meet the egress proxy too.
const proxyBypassNone = "<-loopback>"

// reservedFlags may not come from ExtraFlags: they would move the DevTools
// endpoint off loopback, pin its port or swap the profile we clean up.
var reservedFlags = []string{
	"--remote-debugging-port",
	"--remote-debugging-address",
	"--remote-debugging-pipe",
	"--remote-allow-origins",
	"--user-data-dir",
	// The egress wall: every request goes through the core's proxy.
	"--proxy-server",
	"--proxy-bypass-list",
	"--proxy-pac-url",
	"--no-proxy-server",
	"--proxy-auto-detect",
	"--enable-quic",
	"--host-resolver-rules",
	"--host-rules",
}

// flagName returns "--name" of "--name=value".
func flagName(f string) string {
	if i := strings.IndexByte(f, '='); i >= 0 {
		return f[:i]
	}
	return f
}

// buildArgs returns Chromium's command line (without argv[0]).
func buildArgs(o Options, userDataDir string) ([]string, error) {
	var extra []string
	disabled := append([]string(nil), baseDisabledFeatures...)
	loadsExtension := false
	windowSize := false
	for _, f := range o.ExtraFlags {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.HasPrefix(f, "--") {
			return nil, fmt.Errorf("extra flag %q: not a --switch", f)
		}
		name := flagName(f)
		for _, r := range reservedFlags {
			if name == r {
				return nil, fmt.Errorf("extra flag %q: reserved", name)
			}
		}
		switch name {
		case "--disable-features":
			// Chromium keeps only the last --disable-features; merge instead.
			for _, v := range strings.Split(strings.TrimPrefix(f, name+"="), ",") {
				if v = strings.TrimSpace(v); v != "" && v != name {
					disabled = append(disabled, v)
				}
			}
			continue
		case "--load-extension", "--disable-extensions-except":
			loadsExtension = true
		case "--window-size":
			windowSize = true
		case "--disable-extensions":
			continue // added below unless an extension is loaded
		}
		extra = append(extra, f)
	}

	args := []string{}
	if o.Headless {
		args = append(args, "--headless=new")
	}
	sandboxOff, err := noSandbox(o.NoSandbox)
	if err != nil {
		return nil, err
	}
	if sandboxOff {
		args = append(args, "--no-sandbox")
	}
	args = append(args,
		"--disable-gpu",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--no-first-run",
		"--disable-dev-shm-usage",
		"--hide-scrollbars",
		"--mute-audio",
		"--no-default-browser-check",
		// Every session's window is "occluded" by the others in a headless
		// browser; backgrounding would throttle its frames and timers
		// (tab capture then saw a click's repaint only a second later).
		"--disable-backgrounding-occluded-windows",
		"--disable-renderer-backgrounding",
		"--disable-background-timer-throttling",
		// QUIC is UDP straight to the server, around a proxy.
		"--disable-quic",
		"--remote-debugging-port=0",
		"--remote-debugging-address=127.0.0.1",
		"--user-data-dir="+userDataDir,
		"--disable-features="+strings.Join(dedupe(disabled), ","),
	)
	if o.Proxy != "" {
		// A persistent profile's pages use the default context, which
		// takes its proxy from the command line.
		args = append(args, "--proxy-server="+o.Proxy, "--proxy-bypass-list="+proxyBypassNone)
	}
	if !loadsExtension {
		args = append(args, "--disable-extensions")
	}
	if !windowSize {
		args = append(args, fmt.Sprintf("--window-size=%d,%d", defaultWidth, defaultHeight))
	}
	args = append(args, extra...)
	// The initial tab: blank rather than the new-tab page.
	return append(args, "about:blank"), nil
}

// noSandbox decides --no-sandbox: "auto" (or empty) turns the sandbox off only
// when running as root, where Chromium refuses to start with it.
func noSandbox(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto":
		return os.Geteuid() == 0, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("NoSandbox %q: want auto, true or false", v)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
