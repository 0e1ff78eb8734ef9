package harness

import (
	"context"
	"fmt"
	"os"

	"github.com/chromedp/chromedp"
)

// ChromiumPath is Debian's Chromium, executed directly (the /usr/bin
// wrapper adds flags of its own).
const ChromiumPath = "/usr/lib/chromium/chromium"

// StartChromium starts a headless Chromium with a fresh profile for a test
// or the bench: with viewer set, as a person's browser watching the panel
// (autoplay, WebRTC over loopback with real host candidates); otherwise as
// a browser driven over CDP. extra options come last (window size, flags).
// stop ends it and removes the profile.
func StartChromium(viewer bool, extra ...chromedp.ExecAllocatorOption) (bctx context.Context, stop func(), err error) {
	dir, err := os.MkdirTemp("", "tabcast-test-chromium-")
	if err != nil {
		return nil, nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ChromiumPath), chromedp.Flag("headless", "new"),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(dir),
	}
	if viewer {
		opts = append(opts,
			chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
			// The appliance runs on this machine: let WebRTC use loopback
			// and show real host candidates instead of mDNS names.
			chromedp.Flag("allow-loopback-in-peer-connection", true),
			chromedp.Flag("disable-features", "WebRtcHideLocalIpsWithMdns"),
			chromedp.WindowSize(1280, 800))
	} else {
		opts = append(opts, chromedp.Flag("hide-scrollbars", true), chromedp.WindowSize(1280, 720))
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	bctx, cancelB := chromedp.NewContext(actx)
	stop = func() { cancelB(); cancelA(); os.RemoveAll(dir) }
	if err := chromedp.Do(bctx); err != nil {
		stop()
		return nil, nil, fmt.Errorf("chromium: %w", err)
	}
	return bctx, stop, nil
}
