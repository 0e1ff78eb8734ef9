package app

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins/capture"
)

// relaunchFlagsWait bounds asking the capture plugins for their flags
// again: a relaunch after a crash has seconds, not a plugin restart's
// worth of them.
const relaunchFlagsWait = time.Second

// relaunchOptions are the options of a Chromium started after the first
// (a relaunch after a crash, a per-session or persistent profile's
// browser): the first's, with the capture plugins' flags asked again. A
// capture-tab plugin that restarted since then wrote its extension to a
// new directory (the killed one's is removed at once) and picks tabs by a
// new marker, so a browser started with the old flags could not capture.
// A plugin that does not answer in time leaves the first flags.
func (a *appliance) relaunchOptions(ctx context.Context, o browser.Options) browser.Options {
	cctx, cancel := context.WithTimeout(ctx, relaunchFlagsWait)
	defer cancel()
	fresh, err := a.captureFlags(cctx)
	if err != nil {
		a.log.Warn("relaunch: the capture plugins' flags as at start", "err", err)
		return o
	}
	o.ExtraFlags = swapFlags(o.ExtraFlags, a.pluginFlags, fresh)
	return o
}

// captureFlags asks the running capture plugins for their Chromium flags.
func (a *appliance) captureFlags(ctx context.Context) ([]string, error) {
	var out []string
	for _, h := range []*supervisor.Handle{a.capture, a.tab} {
		if h == nil {
			continue
		}
		c, _, err := supervisor.Dispense[capture.Capturer](h).Get(ctx)
		if err != nil {
			return nil, fmt.Errorf("capture plugin %s: %w", h.Status().Name, err)
		}
		f, err := c.ChromiumFlags(ctx)
		if err != nil {
			return nil, fmt.Errorf("capture plugin %s flags: %w", h.Status().Name, err)
		}
		out = append(out, f...)
	}
	return out, nil
}

// swapFlags replaces the run old (the plugins' flags at start) in all with
// fresh; all is returned as it is when it does not hold old.
func swapFlags(all, old, fresh []string) []string {
	if slices.Equal(old, fresh) {
		return all
	}
	for i := 0; i+len(old) <= len(all); i++ {
		if slices.Equal(all[i:i+len(old)], old) {
			return slices.Concat(all[:i], fresh, all[i+len(old):])
		}
	}
	return all
}
