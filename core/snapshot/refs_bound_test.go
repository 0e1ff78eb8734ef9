package snapshot

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/core/errcode"
)

type keyPage string

func (k keyPage) Target() *chromedp.Target { return &chromedp.Target{TargetID: target.ID(k)} }

// TestSnapshotterBound: pages that closed unseen (a popup that closed
// itself) do not pile up: past maxPages the least recently used table goes,
// and one still in use stays.
func TestSnapshotterBound(t *testing.T) {
	s := NewSnapshotter()
	keep := s.Refs(keyPage("keep"))
	for i := 0; i < 3*maxPages; i++ {
		s.Refs(keyPage(fmt.Sprint("popup-", i)))
		if i%50 == 0 {
			s.Refs(keyPage("keep")) // in use all along
		}
	}
	if n := len(s.pages); n != maxPages || len(s.used) != maxPages {
		t.Fatalf("%d tables (%d use marks), want %d", n, len(s.used), maxPages)
	}
	if s.Refs(keyPage("keep")) != keep {
		t.Fatal("the table in use was evicted")
	}
	if _, ok := s.pages["popup-0"]; ok {
		t.Fatal("the oldest unused table is still kept")
	}
	s.Forget(keyPage("keep"))
	if _, ok := s.used["keep"]; ok {
		t.Fatal("Forget left the table's use mark")
	}
}

// countingSession counts the CDP methods called through it.
type countingSession struct {
	cdp.Session
	mu    sync.Mutex
	calls map[string][]string // method → the object groups named, in order
}

func (c *countingSession) Call(ctx context.Context, method string, params, result any) error {
	group := ""
	switch p := params.(type) {
	case dom.ResolveNodeParams:
		group = p.ObjectGroup
	case *dom.ResolveNodeParams:
		group = p.ObjectGroup
	case runtime.ReleaseObjectGroupParams:
		group = p.ObjectGroup
	case *runtime.ReleaseObjectGroupParams:
		group = p.ObjectGroup
	}
	c.mu.Lock()
	c.calls[method] = append(c.calls[method], group)
	c.mu.Unlock()
	return c.Session.Call(ctx, method, params, result)
}

func (c *countingSession) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls[method])
}

// TestRefObjectsKept: a ref's node is resolved to a JS object once per
// snapshot — later calls on the ref cost one round trip, not three
// (resolve, call, release) — and the objects are released when a newer
// snapshot replaces the table. A handle still in use across that
// replacement resolves its node again instead of failing.
func TestRefObjectsKept(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/": dynamicPage})
	p := newPage(t, ctx, srv.URL+"/")
	sn := NewSnapshotter()
	defer sn.Forget(p)
	s, err := sn.Take(ctx, p, Options{Revision: 1})
	if err != nil {
		t.Fatal(err)
	}
	ref := refOf(t, s, "button", "Save")
	cs := &countingSession{calls: map[string][]string{}}
	lookup := func() *Element {
		el, err := sn.Lookup(p, ref, 1)
		if err != nil {
			t.Fatal(err)
		}
		if cs.Session == nil {
			cs.Session = el.Session
		}
		el.Session = cs
		return el
	}
	for i := range 3 {
		if txt, err := lookup().Text(ctx); err != nil || txt != "Save" {
			t.Fatalf("call %d: %q %v", i, txt, err)
		}
	}
	if n, m := cs.count(dom.CommandResolveNode), cs.count(runtime.CommandCallFunctionOn); n != 1 || m != 3 {
		t.Fatalf("3 calls on one ref: %d resolveNode, %d callFunctionOn; want 1, 3", n, m)
	}
	if n := cs.count(runtime.CommandReleaseObjectGroup); n != 0 {
		t.Fatalf("%d releases while the snapshot is current", n)
	}
	kept := cs.calls[dom.CommandResolveNode][0]

	held := lookup()
	if _, err := sn.Take(ctx, p, Options{Revision: 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for cs.count(runtime.CommandReleaseObjectGroup) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r := cs.calls[runtime.CommandReleaseObjectGroup]; len(r) != 1 || r[0] != kept {
		t.Fatalf("after a new snapshot: releases %v, want the kept group %q once", r, kept)
	}
	// The handle from before: its object was released with the group; the
	// node is still there, so the call resolves it again and works.
	if txt, err := held.Text(ctx); err != nil || txt != "Save" {
		t.Fatalf("handle across a new snapshot: %q %v", txt, err)
	}
	// …and a re-rendered node is still stale through it.
	if err := p.Evaluate(ctx, "rerender()", nil); err != nil {
		t.Fatal(err)
	}
	_, err = held.Text(ctx)
	wantCode(t, err, errcode.StaleRef)
}
