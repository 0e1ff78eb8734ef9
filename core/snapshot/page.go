package snapshot

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Page is what the package needs of a page. *browser.Page satisfies it.
//
// Target must return the page's attached CDP session; the package only
// issues commands on it (DOM, Accessibility, Runtime, Page.getFrameTree)
// and never dispatches input.
//
// Out-of-process iframes (OOPIFs: a cross-site iframe under site isolation)
// live in other CDP targets that the page session cannot reach. A Page that
// also implements FrameAttacher (see WithFrames and Attacher) gets them
// inline in snapshots and can resolve and click refs inside them; without
// it an OOPIF shows as an iframe node marked [unreachable].
type Page interface {
	Target() *chromedp.Target
}

// FrameAttacher gives a CDP session attached to the OOPIF target targetID
// (an "iframe" target; its id equals the frame id). Sessions may be cached
// by the implementation and must stay usable until it is closed.
type FrameAttacher interface {
	AttachFrame(ctx context.Context, targetID string) (cdp.Session, error)
}

// WithFrames pairs a page with an attacher for its OOPIFs.
func WithFrames(p Page, a FrameAttacher) Page {
	return &framesPage{Page: p, a: a}
}

type framesPage struct {
	Page
	a FrameAttacher
}

func (f *framesPage) AttachFrame(ctx context.Context, targetID string) (cdp.Session, error) {
	return f.a.AttachFrame(ctx, targetID)
}

func pageKey(p Page) string { return string(p.Target().TargetID) }

// frameInfo places a document: its session, its frame id, and (for a child
// frame) the iframe element that owns it in the parent frame.
type frameInfo struct {
	id     cdp.FrameID
	url    string
	sess   cdp.Session
	parent *frameInfo
	owner  cdp.BackendNodeID // the iframe element in parent.sess
}

// oopif reports whether f runs in another target than its parent.
func (f *frameInfo) oopif() bool { return f.parent != nil && f.parent.sess != f.sess }

// frameTree returns the main frame of sess and the set of frames that sess
// hosts (same-process frames; OOPIFs are not listed by the renderer).
func frameTree(ctx context.Context, sess cdp.Session) (*cdp.Frame, map[cdp.FrameID]bool, error) {
	r, err := cdp.Call(ctx, sess, page.GetFrameTree, cdp.Empty{})
	if err != nil {
		return nil, nil, fmt.Errorf("get frame tree: %w", err)
	}
	set := map[cdp.FrameID]bool{}
	var walk func(t *page.FrameTree)
	walk = func(t *page.FrameTree) {
		if t == nil || t.Frame == nil {
			return
		}
		set[t.Frame.ID] = true
		for _, c := range t.ChildFrames {
			walk(c)
		}
	}
	walk(r.FrameTree)
	if r.FrameTree == nil || r.FrameTree.Frame == nil {
		return nil, nil, fmt.Errorf("get frame tree: empty")
	}
	return r.FrameTree.Frame, set, nil
}

func mainFrame(ctx context.Context, p Page) (*frameInfo, error) {
	t := p.Target()
	if t == nil {
		return nil, fmt.Errorf("snapshot: page has no target")
	}
	f, _, err := frameTree(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &frameInfo{id: f.ID, url: f.URL, sess: t}, nil
}
