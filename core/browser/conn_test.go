package browser

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/runtime"
	"go.uber.org/goleak"
)

// evaluate is Runtime.evaluate's params, by value.
func evaluate(expr string) runtime.EvaluateParams {
	yes := true
	return runtime.EvaluateParams{Expression: expr, ReturnByValue: &yes, AwaitPromise: &yes}
}

// A PageConn's commands are written back to back and run in order; the
// browser's Close closes it.
func TestPageConnPipelined(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.DialConn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var replies []Reply
	for _, expr := range []string{"window.n = 1", "window.n += 1", "window.n *= 10"} {
		r, err := c.Send(runtime.CommandEvaluate, evaluate(expr))
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, r)
	}
	var res runtime.EvaluateResult
	for _, r := range replies {
		if err := r.Decode(ctx, &res); err != nil {
			t.Fatal(err)
		}
	}
	if res.Result == nil || string(res.Result.Value) != "20" {
		t.Fatalf("last result %+v, want 20 (the commands ran out of order?)", res.Result)
	}
	// A protocol error comes back as such.
	r, err := c.Send("No.suchMethod", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ce *cdproto.Error
	if err := r.Wait(ctx); !errors.As(err, &ce) {
		t.Fatalf("unknown method: %v, want a *cdproto.Error", err)
	}

	second, err := p.DialConn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if !c.Closed() {
		t.Fatal("not closed after Close")
	}
	if _, err := c.Send(runtime.CommandEvaluate, evaluate("1")); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Send after Close: %v, want ErrConnClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.Done():
	default:
		t.Fatal("the browser's Close left a PageConn open")
	}
	if _, err := p.DialConn(ctx); err == nil {
		t.Fatal("DialConn after the browser's Close succeeded")
	}
}

// The BrowserConn is shared, answers the browser's own commands and those
// of attached sessions, carries raw JSON and a session's events (what a CDP
// proxy needs), bounds the commands in flight, fails what a detach leaves
// unanswered and closes with the browser.
func TestBrowserConn(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := b.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := b.Conn(ctx); err != nil || again != conn {
		t.Fatalf("second Conn: %p, %v; want the shared %p", again, err, conn)
	}
	v, err := cdp.Call(ctx, conn, cdpbrowser.GetVersion, cdp.Empty{})
	if err != nil || v.Product == "" {
		t.Fatalf("Browser.getVersion: %+v, %v", v, err)
	}

	s, err := conn.AttachTarget(ctx, p.TargetID())
	if err != nil {
		t.Fatal(err)
	}
	res, err := cdp.Call(ctx, s, runtime.Evaluate, evaluate("6 * 7"))
	if err != nil || res.Result == nil || string(res.Result.Value) != "42" {
		t.Fatalf("evaluate on the attached session: %+v, %v", res, err)
	}

	// Proxy mode: raw JSON in, the session's raw events out.
	var mu sync.Mutex
	var events []string
	ended := make(chan struct{})
	stop := conn.Listen(s.ID(), func(m *cdproto.Message) {
		mu.Lock()
		events = append(events, string(m.Method))
		mu.Unlock()
	}, func() { close(ended) })
	defer stop()
	for _, raw := range []struct{ method, params string }{
		{"Runtime.enable", `{}`},
		{"Runtime.evaluate", `{"expression":"console.log('via proxy')"}`},
	} {
		r, err := conn.Send(ctx, s.ID(), raw.method, jsonv2.Value(raw.params))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatalf("%s: %v", raw.method, err)
		}
	}
	waitFor(t, "the console event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e == "Runtime.consoleAPICalled" {
				return true
			}
		}
		return false
	})

	// The bound: maxInFlight calls that never answer hold every slot.
	var hung []Reply
	for range maxInFlight {
		r, err := conn.Send(ctx, s.ID(), runtime.CommandEvaluate, evaluate("new Promise(() => {})"))
		if err != nil {
			t.Fatal(err)
		}
		hung = append(hung, r)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = conn.Send(short, "", cdpbrowser.CommandGetVersion, nil)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call beyond the bound: %v, want to wait for a slot", err)
	}
	// Closing the page detaches the session: its calls end, the slots free.
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range hung {
		if err := r.Wait(ctx); err == nil || ctx.Err() != nil {
			t.Fatalf("a call of the closed page: %v (ctx %v), want an error", err, ctx.Err())
		}
	}
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the listener of a detached session was not ended")
	}
	if _, err := cdp.Call(ctx, conn, cdpbrowser.GetVersion, cdp.Empty{}); err != nil {
		t.Fatalf("after the detach: %v", err)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	default:
		t.Fatal("the browser's Close left its connection open")
	}
	if _, err := cdp.Call(ctx, conn, cdpbrowser.GetVersion, cdp.Empty{}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("a call after Close: %v, want ErrConnClosed", err)
	}
	if _, err := b.Conn(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Conn after Close: %v, want ErrClosed", err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
