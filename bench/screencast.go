package main

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/test/harness"
)

// screencastFrame is one Page.screencastFrame as the bench sees it.
type screencastFrame struct {
	id   int64
	at   time.Time // arrival in this process
	ts   time.Time // the frame's own timestamp (metadata), zero if none
	jpeg []byte
}

// startScreencast starts a 1280x720 JPEG (quality 80) screencast of the
// page of bctx; frames come on the channel, to be acked by the reader.
// The CDP listener must not block or call CDP: a frame that finds the
// channel full stays unacked, and Chromium sends the newest later.
func startScreencast(bctx context.Context) (<-chan screencastFrame, error) {
	events := make(chan screencastFrame, 8)
	if err := chromedp.Listen(bctx, func(ev any) {
		f, ok := ev.(*page.EventScreencastFrame)
		if !ok {
			return
		}
		fr := screencastFrame{id: f.SessionID, at: time.Now(), jpeg: f.Data}
		if f.Metadata != nil && f.Metadata.Timestamp > 0 {
			fr.ts = time.Unix(0, int64(float64(f.Metadata.Timestamp)*1e9))
		}
		select {
		case events <- fr:
		default:
		}
	}); err != nil {
		return nil, err
	}
	q := int64(80)
	if _, err := chromedp.Call(bctx, page.StartScreencast, page.StartScreencastParams{
		Format: page.StartScreencastFormatJpeg, Quality: &q, MaxWidth: 1280, MaxHeight: 720,
	}); err != nil {
		return nil, err
	}
	return events, nil
}

// ackScreencast acks one frame (at once, as every screencast consumer here).
func ackScreencast(bctx context.Context, f screencastFrame) {
	_, _ = chromedp.Call(bctx, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: f.id})
}

// openPage starts a CDP-driven Chromium (the appliance's flags) on pageURL.
func openPage(pageURL string) (context.Context, func(), error) {
	bctx, done, err := harness.StartChromium(false)
	if err != nil {
		return nil, nil, err
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(pageURL)); err != nil {
		done()
		return nil, nil, err
	}
	return bctx, done, nil
}
