package browser

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// devtoolsDials are the ways Go code opens a DevTools connection of its
// own: chromedp's remote package and allocators, a WebSocket dial, or a
// DevTools address built by hand.
var devtoolsDials = []string{
	`"github.com/chromedp/chromedp/remote"`,
	"chromedp.NewRemoteAllocator(",
	"chromedp.NewExecAllocator(",
	"websocket.Dial(",
	"/devtools/",
}

// TestOnlyBrowserDialsDevTools: core/browser owns the DevTools connections
// (package doc); no other package of the core or the appliance dials
// Chromium itself — it takes a Page, a PageConn or the BrowserConn. The
// plugins (capture-*) are separate processes and are not checked. Tests
// are exempt: they drive Chromium or the signaling socket as clients.
func TestOnlyBrowserDialsDevTools(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ownHits := 0
	for _, dir := range []string{"core", "appliance"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			own := filepath.Dir(rel) == filepath.Join("core", "browser")
			for _, pat := range devtoolsDials {
				if !strings.Contains(string(b), pat) {
					continue
				}
				if own {
					ownHits++
				} else {
					t.Errorf("%s: %s — DevTools connections come from core/browser (Page.DialConn, Browser.Conn)", rel, pat)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if ownHits == 0 {
		t.Fatal("core/browser itself matched no pattern: the patterns are stale")
	}
}
