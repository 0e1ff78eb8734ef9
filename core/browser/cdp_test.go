package browser

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"go.uber.org/goleak"
)

func TestPageTargetAndListen(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var urls []string
	stop, err := p.Listen(func(ev any) {
		if ev, ok := ev.(*page.EventFrameNavigated); ok && ev.Frame.ParentID == "" {
			mu.Lock()
			urls = append(urls, ev.Frame.URL)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, "data:text/html,<title>one</title>"); err != nil {
		t.Fatal(err)
	}
	// The session answers commands directly.
	h, err := cdp.Call(ctx, p.Target(), page.GetNavigationHistory, cdp.Empty{})
	if err != nil || len(h.Entries) == 0 || h.Entries[h.CurrentIndex].Title != "one" {
		t.Fatalf("history through Target: %+v, %v", h, err)
	}
	mu.Lock()
	got := len(urls)
	mu.Unlock()
	if got != 1 {
		t.Fatalf("listener saw %d main-frame navigations, want 1", got)
	}

	stop()
	if err := p.Navigate(ctx, "data:text/html,<title>two</title>"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got = len(urls)
	mu.Unlock()
	if got != 1 {
		t.Fatalf("listener called after stop: %d navigations", got)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
