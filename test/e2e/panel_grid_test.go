package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// gridCSPProbe records every Content-Security-Policy violation of a page
// (an inline script or style the panel must not use) in window.__cspViolations.
const gridCSPProbe = `window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + (e.sourceFile || "") + ":" + e.lineNumber));`

// gridBrowser is viewerBrowser for an HTTPS appliance: the profile trusts
// exactly the certificate whose public key hashes to spki, and records CSP
// violations on every page.
func gridBrowser(t *testing.T, spki string) context.Context {
	t.Helper()
	ctx := viewerBrowser(t, chromedp.Flag("ignore-certificate-errors-spki-list", spki), chromedp.WindowSize(1366, 768))
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: gridCSPProbe})
		return err
	})); err != nil {
		t.Fatalf("viewer chromium: %v", err)
	}
	return ctx
}

// gridEval runs expr once in the browser of bctx.
func gridEval[T any](t *testing.T, bctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(bctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// gridNoCSPViolations fails the test when the current page broke its CSP.
func gridNoCSPViolations(t *testing.T, bctx context.Context, where string) {
	t.Helper()
	if v := gridEval[[]string](t, bctx, `window.__cspViolations || []`); len(v) > 0 {
		t.Errorf("%s: CSP violations: %v", where, v)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// gridCard is a selector of the grid card of session id.
func gridCard(id string) string {
	return `document.querySelector('[data-testid="session-card"][data-session-id=` + jsString(id) + `]')`
}

// gridThumbHash reads the card's thumbnail through a canvas and returns a
// checksum of its pixels plus the centre pixel (-1 while none is loaded).
func gridThumbHash(id string) string {
	return `(() => { const c = ` + gridCard(id) + `; const img = c && c.querySelector('[data-testid="card-thumb"]');
		if (!img || !img.complete || !img.naturalWidth) return [-1, -1, -1, -1];
		const cv = document.createElement('canvas'); cv.width = img.naturalWidth; cv.height = img.naturalHeight;
		const g = cv.getContext('2d'); g.drawImage(img, 0, 0);
		const d = g.getImageData(0, 0, cv.width, cv.height).data;
		let h = 0; for (let i = 0; i < d.length; i += 4 * 97) h = (h * 31 + d[i] + 3 * d[i+1] + 7 * d[i+2]) % 1000000007;
		const m = ((cv.height >> 1) * cv.width + (cv.width >> 1)) * 4;
		return [h, d[m], d[m+1], d[m+2]] })()`
}

// TestPanelGridOverHTTPS drives the session grid, the session view and the
// admin page over HTTPS (a generated certificate that the viewer profile
// trusts by its key): an admin creates a session through the dialog, sees
// live thumbnails, opens a card and watches video, invites a viewer; the
// viewer (a separate browser) sees only that session and watches it view
// only; the admin page shows plugin health to admins only.
func TestPanelGridOverHTTPS(t *testing.T) {
	p := pages(t)
	logDir := t.TempDir()
	const viewerPassword = "password of view1"
	if err := harness.AddUser(filepath.Join(logDir, "users.yaml"), "view1", "viewer", viewerPassword); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	a, err := harness.Start(ctx, logDir, "server.tls=on", "input.allowLoopbackHosts=127.0.0.1", "browser.startURL="+p.URL+"/anim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(15 * time.Second); err != nil {
			t.Errorf("stop: %v\n%s", err, a.LogTail(3000))
		}
	})
	if !strings.HasPrefix(a.URL, "https://") {
		t.Fatalf("server.tls=on serves %s", a.URL)
	}
	def, err := a.DefaultSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := a.CertSPKI()
	if err != nil || spki == "" {
		t.Fatalf("certificate SPKI: %q %v", spki, err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n%s", append(args, a.LogTail(3000))...)
	}

	// ---- the admin's grid ----
	admin := gridBrowser(t, spki)
	if err := a.OpenPanel(admin, "admin", a.AdminPassword, "/sessions.html"); err != nil {
		fail("%v", err)
	}
	if _, err := waitEval(admin, `document.querySelectorAll('[data-testid="session-card"]').length`, func(n int) bool { return n == 1 }, 20*time.Second); err != nil {
		fail("the default session's card: %v", err)
	}
	if got := gridEval[[]string](t, admin, `[document.querySelector('[data-testid="user-name"]').textContent, document.querySelector('[data-testid="user-role"]').textContent,
		String(!document.querySelector('[data-testid="new-session"]').hidden), String(!!document.querySelector('[data-testid="logout"]')),
		document.querySelector('[data-testid="link-sessions"]').getAttribute('href'), String(!document.querySelector('[data-testid="link-admin"]').hidden)]`); strings.Join(got, "|") != "admin|admin|true|true|/sessions.html|true" {
		t.Errorf("admin header (user, role, new visible, logout, sessions link, admin link visible) = %v", got)
	}

	// A bad URL: the dialog shows the API's message and stays open.
	open := `(() => { document.querySelector('[data-testid="new-session"]').click(); return document.querySelector('[data-testid="new-dialog"]').open })()`
	if !gridEval[bool](t, admin, open) {
		t.Fatal("the New session dialog did not open")
	}
	submit := func(url string) {
		t.Helper()
		gridEval[bool](t, admin, `(() => { document.querySelector('[data-testid="new-url"]').value = `+jsString(url)+`;
			document.querySelector('[data-testid="new-viewport"]').value = "1280x720";
			document.querySelector('[data-testid="new-form"]').requestSubmit(); return true })()`)
	}
	submit("file:///etc/passwd")
	if msg, err := waitEval(admin, `document.querySelector('[data-testid="new-error"]').textContent`, func(s string) bool { return s != "" }, 15*time.Second); err != nil || !strings.Contains(msg, "url") {
		t.Errorf("a refused URL shows %q (%v), want the API's message", msg, err)
	}
	gridShot(t, admin, "new-dialog-error")
	green := p.URL + "/solid?c=00ff00"
	submit(green)
	if _, err := waitEval(admin, `!document.querySelector('[data-testid="new-dialog"]').open && document.querySelectorAll('[data-testid="session-card"]').length`, func(n int) bool { return n == 2 }, 40*time.Second); err != nil {
		msg, _ := chromedp.Run(admin, chromedp.Evaluate[string](`document.querySelector('[data-testid="new-error"]').textContent`))
		fail("the created session's card: %v (dialog error %q)", err, msg)
	}
	ss, err := a.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var greenID string
	for _, s := range ss {
		if s.ID != def.ID && strings.Contains(s.URL, "/solid?c=00ff00") {
			greenID = s.ID
		}
	}
	if greenID == "" {
		t.Fatalf("no session on %s: %+v", green, ss)
	}
	cardText := func(id, field string) string {
		return gridEval[string](t, admin, `(`+gridCard(id)+`.querySelector('[data-testid="`+field+`"]')||{}).textContent||""`)
	}
	if _, err := waitEval(admin, `(`+gridCard(greenID)+`.querySelector('[data-testid="card-state"]')||{}).textContent`, func(s string) bool { return s == "ready" }, 20*time.Second); err != nil {
		t.Errorf("green card state: %v", err)
	}
	if u := cardText(greenID, "card-url"); !strings.Contains(u, "/solid?c=00ff00") {
		t.Errorf("green card URL %q", u)
	}
	if o := cardText(greenID, "card-owner"); !strings.Contains(o, "admin") {
		t.Errorf("green card owner %q", o)
	}
	if v := cardText(greenID, "card-viewers"); !strings.Contains(v, "viewer") {
		t.Errorf("green card viewers %q", v)
	}

	// Live thumbnails: both load; the animated one changes. A session
	// captures only while someone watches it, so a Go viewer watches each
	// one meanwhile.
	wctx, stopWatching := context.WithCancel(ctx)
	watchDone := make(chan struct{}, 2)
	for _, id := range []string{def.ID, greenID} {
		go func() {
			defer func() { watchDone <- struct{}{} }()
			_, _ = viewer.Watch(wctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: id, Codec: "vp8", For: 5 * time.Minute, HTTPClient: a.Client})
		}()
	}
	defer func() {
		stopWatching()
		for range 2 {
			<-watchDone
		}
	}()
	for _, id := range []string{def.ID, greenID} {
		if px, err := waitEval(admin, gridThumbHash(id), func(v []int) bool { return len(v) == 4 && v[0] >= 0 }, 30*time.Second); err != nil {
			fail("thumbnail of %s never loaded: %v (%v)", id, err, px)
		}
	}
	gpx := gridEval[[]int](t, admin, gridThumbHash(greenID))
	if gpx[1] > 80 || gpx[2] < 180 || gpx[3] > 80 {
		t.Errorf("green session's thumbnail centre is %v, want green", gpx[1:])
	}
	first := gridEval[[]int](t, admin, gridThumbHash(def.ID))
	firstURL := gridEval[string](t, admin, `(`+gridCard(def.ID)+`.querySelector('[data-testid="card-thumb"]')).src`)
	if _, err := waitEval(admin, gridThumbHash(def.ID), func(v []int) bool { return len(v) == 4 && v[0] >= 0 && v[0] != first[0] }, 20*time.Second); err != nil {
		t.Errorf("the animated session's thumbnail did not change: %v", err)
	}
	if u := gridEval[string](t, admin, `(`+gridCard(def.ID)+`.querySelector('[data-testid="card-thumb"]')).src`); u == firstURL || !strings.HasPrefix(u, "blob:") {
		t.Errorf("thumbnail URL %q (was %q), want a new blob: URL", u, firstURL)
	}

	// The still page's thumbnail stays green (it never blanks between
	// refreshes), and the watchers show in the viewer counts.
	for range 6 {
		if px := gridEval[[]int](t, admin, gridThumbHash(greenID)); px[0] < 0 || px[1] > 80 || px[2] < 180 || px[3] > 80 {
			t.Errorf("green thumbnail went %v", px)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if v, err := waitEval(admin, `Number(`+gridCard(def.ID)+`.querySelector('[data-testid="card-viewers"]').dataset.count)`, func(n int) bool { return n >= 1 }, 10*time.Second); err != nil {
		t.Errorf("the card's viewer count %d never showed the watcher: %v", v, err)
	}
	gridShot(t, admin, "sessions-admin")
	stopWatching()

	// Invite view1 to watch the green session.
	gridEval[bool](t, admin, `(() => { const c = `+gridCard(greenID)+`;
		c.querySelector('[data-testid="card-invite-user"]').value = "view1";
		c.querySelector('[data-testid="card-invite-form"]').requestSubmit(); return true })()`)
	if _, err := waitEval(admin, `!!`+gridCard(greenID)+`.querySelector('[data-testid="card-invitee"][data-user="view1"]')`, func(b bool) bool { return b }, 15*time.Second); err != nil {
		fail("the invitation is not shown: %v (card error %q)", err, cardText(greenID, "card-error"))
	}
	var snap struct {
		Session struct {
			Invited []string `json:"invited"`
		} `json:"session"`
	}
	if err := a.Do(ctx, "GET", "/api/v1/sessions/"+greenID, "", &snap); err != nil || strings.Join(snap.Session.Invited, ",") != "view1" {
		t.Errorf("invited after the UI invite: %v %v", snap.Session.Invited, err)
	}
	gridNoCSPViolations(t, admin, "sessions.html (admin)")

	// Open the animated card: live video in the session view.
	gridEval[bool](t, admin, `(() => { `+gridCard(def.ID)+`.querySelector('[data-testid="card-open"]').click(); return true })()`)
	if _, err := waitEval(admin, `location.pathname + location.search`, func(s string) bool { return s == "/?session="+def.ID }, 15*time.Second); err != nil {
		t.Fatalf("opening the card: %v", err)
	}
	if _, err := waitEval(admin, connState, func(s string) bool { return s == "connected" }, 30*time.Second); err != nil {
		fail("the session view never connected: %v", err)
	}
	if _, err := waitEval(admin, videoSize, func(v []int) bool { return len(v) == 2 && v[0] > 0 }, 20*time.Second); err != nil {
		fail("no video: %v", err)
	}
	if _, err := waitEval(admin, `document.querySelector('[data-testid="input-state"]').dataset.state`, func(s string) bool { return s == "enabled" }, 20*time.Second); err != nil {
		t.Errorf("the admin's input never came on: %v", err)
	}
	// The snapshot poll shows who watches: this viewer, with input.
	if v, err := waitEval(admin, `[Number(document.querySelector('[data-testid="session-viewers"]').dataset.viewers || 0), Number(document.querySelector('[data-testid="session-viewers"]').dataset.producers || 0)]`,
		func(v []int) bool { return len(v) == 2 && v[0] >= 1 && v[1] >= 1 }, 15*time.Second); err != nil {
		t.Errorf("viewers/producers in the session view: %v (%v)", err, v)
	}
	if got := gridEval[[]string](t, admin, `[document.querySelector('[data-testid="link-sessions"]').getAttribute('href'), String(!!document.querySelector('[data-testid="fullscreen"]'))]`); strings.Join(got, "|") != "/sessions.html|true" {
		t.Errorf("session view header link / fullscreen button: %v", got)
	}
	gridShot(t, admin, "session-view-admin")
	// Usable on a 1024×768 tablet: nothing overflows sideways and the
	// toolbar's last control is on screen.
	if err := chromedp.Do(admin, chromedp.EmulateViewport(1024, 768)); err != nil {
		t.Fatal(err)
	}
	if fit, err := waitEval(admin, `(() => { const r = document.querySelector('[data-testid="fullscreen"]').getBoundingClientRect();
		return document.documentElement.scrollWidth <= innerWidth && r.right <= innerWidth && r.width > 0 &&
			document.querySelector('[data-testid="input-state"]').getBoundingClientRect().width > 0 })()`, func(b bool) bool { return b }, 5*time.Second); err != nil {
		t.Errorf("the session view does not fit 1024x768: %v %v", fit, err)
	}
	gridShot(t, admin, "session-view-1024")
	if err := chromedp.Do(admin, chromedp.EmulateReset()); err != nil {
		t.Fatal(err)
	}
	gridNoCSPViolations(t, admin, "index.html (admin)")

	// ---- the invited viewer, in its own browser ----
	view := gridBrowser(t, spki)
	if err := a.OpenPanel(view, "view1", viewerPassword, "/sessions.html"); err != nil {
		fail("%v", err)
	}
	ids, err := waitEval(view, `[...document.querySelectorAll('[data-testid="session-card"]')].map(c => c.dataset.sessionId)`, func(v []string) bool { return len(v) > 0 }, 20*time.Second)
	if err != nil || len(ids) != 1 || ids[0] != greenID {
		fail("view1's grid shows %v (%v), want exactly [%s]", ids, err, greenID)
	}
	if got := gridEval[[]bool](t, view, `[document.querySelector('[data-testid="new-session"]').hidden,
		`+gridCard(greenID)+`.querySelector('[data-testid="card-close"]').hidden,
		`+gridCard(greenID)+`.querySelector('[data-testid="card-invite-form"]').hidden,
		document.querySelector('[data-testid="link-admin"]').hidden]`); fmt.Sprint(got) != "[true true true true]" {
		t.Errorf("viewer sees create/close/invite/admin (hidden flags %v)", got)
	}
	if r := gridEval[string](t, view, `document.querySelector('[data-testid="user-role"]').textContent`); r != "viewer" {
		t.Errorf("viewer's role badge %q", r)
	}
	if _, err := waitEval(view, gridThumbHash(greenID), func(v []int) bool { return len(v) == 4 && v[0] >= 0 }, 30*time.Second); err != nil {
		t.Errorf("viewer's thumbnail never loaded: %v", err)
	}
	gridShot(t, view, "sessions-view1")
	gridNoCSPViolations(t, view, "sessions.html (view1)")
	gridEval[bool](t, view, `(() => { `+gridCard(greenID)+`.querySelector('[data-testid="card-open"]').click(); return true })()`)
	if _, err := waitEval(view, `location.pathname + location.search`, func(s string) bool { return s == "/?session="+greenID }, 15*time.Second); err != nil {
		t.Fatalf("viewer opening the card: %v", err)
	}
	if _, err := waitEval(view, connState, func(s string) bool { return s == "connected" }, 30*time.Second); err != nil {
		fail("the viewer's session view never connected: %v", err)
	}
	if _, err := waitEval(view, videoSize, func(v []int) bool { return len(v) == 2 && v[0] > 0 }, 20*time.Second); err != nil {
		fail("viewer: no video: %v", err)
	}
	if px, err := waitEval(view, centrePixel, func(px []int) bool { return len(px) == 3 && px[0] < 60 && px[1] > 200 && px[2] < 60 }, 15*time.Second); err != nil {
		t.Errorf("viewer's picture is not the green page: %v (%v)", err, px)
	}
	if s, err := waitEval(view, `document.querySelector('[data-testid="input-state"]').textContent`, func(s string) bool { return s == "View only" }, 15*time.Second); err != nil {
		t.Errorf("viewer's input-state %q (%v), want \"View only\"", s, err)
	}
	in := gridEval[map[string]any](t, view, `window.tabcast.input`)
	if in["interactive"] != false || in["inputError"] != "view_only" || in["enabled"] != false {
		t.Errorf("viewer's input grant: %v, want interactive false, inputError view_only", in)
	}
	// Clicking and typing reach nothing: no control or pointer message goes out.
	if err := chromedp.Do(view,
		chromedp.Click(`[data-testid="session-video"]`),
		chromedp.KeyEvent("hello"),
		chromedp.Sleep(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	in = gridEval[map[string]any](t, view, `window.tabcast.input`)
	if in["controlSeq"] != float64(0) || in["pointerSeq"] != float64(0) || in["pending"] != float64(0) {
		t.Errorf("a view-only viewer sent input: %v", in)
	}
	if got := gridEval[[]bool](t, view, `['address', 'nav-reload', 'nav-back'].map(id => document.querySelector('[data-testid="' + id + '"]').disabled)`); fmt.Sprint(got) != "[true true true]" {
		t.Errorf("view only: address/reload/back disabled = %v", got)
	}
	gridShot(t, view, "session-view-view1")
	gridNoCSPViolations(t, view, "index.html (view1)")

	// ---- the admin page ----
	if err := chromedp.Do(view, chromedp.Navigate(a.URL+"/admin.html")); err != nil {
		t.Fatal(err)
	}
	if s, err := waitEval(view, `(() => { const d = document.querySelector('[data-testid="admin-denied"]'); return d && !d.hidden ? d.textContent : "" })()`, func(s string) bool { return s != "" }, 15*time.Second); err != nil || !strings.Contains(s, "Admins only") {
		t.Errorf("view1 on admin.html: %q (%v), want Admins only", s, err)
	}
	if hidden := gridEval[bool](t, view, `document.querySelector('[data-testid="admin-content"]').hidden`); !hidden {
		t.Error("view1 sees the admin content")
	}

	if err := chromedp.Do(admin, chromedp.Navigate(a.URL+"/admin.html")); err != nil {
		t.Fatal(err)
	}
	plugins, err := waitEval(admin, `Object.fromEntries([...document.querySelectorAll('[data-testid="plugin-row"]')].map(r => [r.dataset.name, r.dataset.state]))`,
		func(m map[string]string) bool {
			return m["capture-cdp"] == "running" && m["encoder-ffmpeg"] == "running" && m["auth-local"] == "running"
		}, 20*time.Second)
	if err != nil {
		t.Errorf("plugin table: %v (%v)", plugins, err)
	}
	if v := gridEval[string](t, admin, `document.querySelector('[data-testid="chromium-version"]').textContent`); v == "–" || v == "" {
		t.Errorf("Chromium version %q", v)
	}
	if n := gridEval[int](t, admin, `document.querySelectorAll('[data-testid="probe-row"]').length`); n == 0 {
		t.Error("no encoder probes shown")
	}
	if acts, err := waitEval(admin, `[...document.querySelectorAll('[data-testid="audit-row"]')].map(r => r.dataset.action)`, func(v []string) bool {
		return strings.Contains(strings.Join(v, ","), "session.invite")
	}, 10*time.Second); err != nil {
		t.Errorf("audit log lacks the invitation: %v (%v)", acts, err)
	}
	if newest := gridEval[[]float64](t, admin, `[...document.querySelectorAll('[data-testid="audit-row"] td:first-child')].slice(0, 2).map(td => Date.parse(td.textContent) || 0)`); len(newest) == 2 && newest[0] < newest[1] {
		t.Errorf("audit log is not newest first: %v", newest)
	}
	// A token: created through the form, its secret shown once, then revoked.
	gridEval[bool](t, admin, `(() => { document.querySelector('[data-testid="token-name"]').value = "grid-test";
		document.querySelector('[data-testid="token-user"]').value = "view1";
		document.querySelector('[data-testid="token-role"]').value = "viewer";
		document.querySelector('[data-testid="token-scope-control"]').checked = false;
		document.querySelector('[data-testid="token-form"]').requestSubmit(); return true })()`)
	secret, err := waitEval(admin, `document.querySelector('[data-testid="token-secret"]').value`, func(s string) bool { return s != "" }, 15*time.Second)
	if err != nil {
		t.Fatalf("no token secret shown: %v (%q)", err, gridEval[string](t, admin, `document.querySelector('[data-testid="token-error"]').textContent`))
	}
	if ro := gridEval[bool](t, admin, `document.querySelector('[data-testid="token-secret"]').readOnly`); !ro {
		t.Error("the token secret field is editable")
	}
	var ok struct {
		OK bool `json:"ok"`
	}
	if err := harnessBearer(ctx, a, secret, &ok); err != nil || !ok.OK {
		t.Errorf("the shown token does not work: %v", err)
	}
	if _, err := waitEval(admin, `[...document.querySelectorAll('[data-testid="token-row"]')].some(r => r.textContent.includes("grid-test"))`, func(b bool) bool { return b }, 10*time.Second); err != nil {
		t.Errorf("the new token is not listed: %v", err)
	}
	revoke := `(() => { const r = [...document.querySelectorAll('[data-testid="token-row"]')].find(r => r.textContent.includes("grid-test"));
		if (!r) return false; r.querySelector('[data-testid="token-revoke"]').click(); return true })()`
	gridEval[bool](t, admin, revoke) // arms
	gridEval[bool](t, admin, revoke) // confirms
	if _, err := waitEval(admin, `[...document.querySelectorAll('[data-testid="token-row"]')].some(r => r.textContent.includes("grid-test"))`, func(b bool) bool { return !b }, 10*time.Second); err != nil {
		t.Errorf("the revoked token is still listed: %v", err)
	}
	if err := harnessBearer(ctx, a, secret, &ok); err == nil {
		t.Error("the revoked token still works")
	}
	gridNoCSPViolations(t, admin, "admin.html (admin)")
	gridNoCSPViolations(t, view, "admin.html (view1)")

	gridShot(t, admin, "admin-page")
	gridShot(t, view, "admin-denied")
}

// gridShot saves a screenshot to $TABCAST_SCREENSHOT_DIR when it is set.
func gridShot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TABCAST_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "grid-"+name+".png"), png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
	}
}

// harnessBearer calls GET /api/v1/sessions with token as the Bearer.
func harnessBearer(ctx context.Context, a *harness.Appliance, token string, out any) error {
	saved := a.Token
	a.Token = token
	defer func() { a.Token = saved }()
	return a.Do(ctx, "GET", "/api/v1/sessions", "", out)
}
