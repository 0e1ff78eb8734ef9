package snapshot

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/domsnapshot"
)

// geometry maps backend node ids of one target (session) to their border
// boxes in top-level viewport CSS pixels, from one DOMSnapshot.captureSnapshot.
type geometry map[cdp.BackendNodeID]Rect

// sessionGeometry captures the layout of every document of f's target and
// converts it to top-level viewport coordinates: document coordinates minus
// the document's scroll, plus the content-box origin of its iframe (same
// process: DOM.getBoxModel is already root-relative), plus the offsets of
// the OOPIF owners above the target.
func sessionGeometry(ctx context.Context, f *frameInfo) (geometry, error) {
	no := false
	res, err := cdp.Call(ctx, f.sess, domsnapshot.CaptureSnapshot, domsnapshot.CaptureSnapshotParams{
		ComputedStyles: []string{}, IncludeDOMRects: &no, IncludePaintOrder: &no,
	})
	if err != nil {
		return nil, fmt.Errorf("capture DOM snapshot: %w", err)
	}
	ox, oy, err := frameOffset(ctx, f)
	if err != nil {
		return nil, err
	}
	g := geometry{}
	for i, d := range res.Documents {
		if d.Nodes == nil || d.Layout == nil {
			continue
		}
		dx, dy := ox-d.ScrollOffsetX, oy-d.ScrollOffsetY
		if i > 0 {
			fid := ""
			if idx := int(d.FrameID); idx >= 0 && idx < len(res.Strings) {
				fid = res.Strings[idx]
			}
			owner, err := cdp.Call(ctx, f.sess, dom.GetFrameOwner, dom.GetFrameOwnerParams{FrameID: cdp.FrameID(fid)})
			if err != nil {
				continue
			}
			bm, err := cdp.Call(ctx, f.sess, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: owner.BackendNodeID})
			if err != nil || bm.Model == nil || len(bm.Model.Content) < 2 {
				continue
			}
			dx += bm.Model.Content[0]
			dy += bm.Model.Content[1]
		}
		for li, ni := range d.Layout.NodeIndex {
			if int(ni) >= len(d.Nodes.BackendNodeID) || li >= len(d.Layout.Bounds) || len(d.Layout.Bounds[li]) < 4 {
				continue
			}
			id := d.Nodes.BackendNodeID[ni]
			if _, ok := g[id]; ok {
				continue
			}
			b := d.Layout.Bounds[li]
			g[id] = Rect{X: b[0] + dx, Y: b[1] + dy, Width: b[2], Height: b[3]}
		}
	}
	return g, nil
}
