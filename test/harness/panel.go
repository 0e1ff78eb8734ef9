package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/chromedp/chromedp"
)

// PanelFramesJS evaluates, in the panel, to how many frames its session
// video has decoded (-1 before there is a video element).
const PanelFramesJS = `(() => { const v = document.querySelector('[data-testid="session-video"]'); return v && v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality().totalVideoFrames : -1 })()`

// OpenPanel logs user in through the panel's login page in the browser of
// bctx and waits until the browser has landed on path (e.g. "/?codec=vp8").
func (a *Appliance) OpenPanel(bctx context.Context, user, password, path string) error {
	if err := chromedp.Do(bctx, chromedp.Navigate(a.URL+"/login.html?next="+url.QueryEscape(path))); err != nil {
		return fmt.Errorf("open the login page: %w", err)
	}
	u, _ := json.Marshal(user)
	p, _ := json.Marshal(password)
	submit := fmt.Sprintf(`(() => {
		const f = document.querySelector('[data-testid="login-form"]');
		if (!f) return false;
		document.querySelector('[data-testid="login-user"]').value = %s;
		document.querySelector('[data-testid="login-password"]').value = %s;
		f.requestSubmit();
		return true })()`, u, p)
	if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](submit)); err != nil || !ok {
		return fmt.Errorf("submit the login form: %v (form found: %v)", err, ok)
	}
	want, _ := json.Marshal(path)
	deadline := time.Now().Add(20 * time.Second)
	for {
		at, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`location.pathname + location.search === %s && document.readyState === "complete"`, want)))
		if err == nil && at {
			return nil
		}
		if time.Now().After(deadline) {
			msg, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('[data-testid="login-error"]')||{}).textContent || location.href`))
			return fmt.Errorf("login as %s did not reach %s: %s", user, path, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
