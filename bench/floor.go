package main

import (
	"bytes"
	"context"
	"image/jpeg"
	"math/rand/v2"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// paintFloor is what no live view can beat: the same clicks on the same
// page dispatched straight into Chromium over CDP (no viewer, no network,
// no encoder), timed to the compositor frame that shows the new colour.
// Every path in the latency table (Tabcast's and the baseline's) pays this
// before its own capture, transport and display costs.
type paintFloor struct {
	Clicks int `json:"clicks"`
	Missed int `json:"missed"`
	// Swap: CDP dispatch → the screencast frame's own timestamp (the
	// compositor's frame, before JPEG encoding).
	SwapP50Ms float64 `json:"inputToCompositorFrameP50Ms"`
	SwapP95Ms float64 `json:"inputToCompositorFrameP95Ms"`
	// Arrival: CDP dispatch → that frame's JPEG in this process.
	ArriveP50Ms float64 `json:"inputToJpegInProcessP50Ms"`
	ArriveP95Ms float64 `json:"inputToJpegInProcessP95Ms"`
}

// measurePaintFloor runs the floor on its own Chromium (the appliance's
// flags, 1280x720) with the latency page.
func measurePaintFloor(ctx context.Context, pageURL string, clicks int) (*paintFloor, error) {
	bctx, done, err := openPage(pageURL)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := chromedp.Call(bctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 1280, Height: 720, DeviceScaleFactor: 1}); err != nil {
		return nil, err
	}
	events, err := startScreencast(bctx)
	if err != nil {
		return nil, err
	}
	// colourOf acks the frame at once (as every screencast consumer here
	// does) and classifies the square's centre.
	colourOf := func(f screencastFrame) int {
		ackScreencast(bctx, f)
		img, err := jpeg.Decode(bytes.NewReader(f.jpeg))
		if err != nil {
			return 0
		}
		r, g, b, _ := img.At(300, 200).RGBA()
		px := [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}
		switch {
		case colourNear(px, colourA):
			return 1
		case colourNear(px, colourB):
			return 2
		}
		return 0
	}
	mouse := func(t input.DispatchMouseEventType) error {
		_, err := chromedp.Call(bctx, input.DispatchMouseEvent, input.DispatchMouseEventParams{
			Type: t, X: 300, Y: 200, Button: input.MouseButtonLeft, Buttons: 1, ClickCount: 1,
		})
		return err
	}
	// The page starts with colour A; each mousedown flips it.
	want := 2
	var swaps, arrivals []float64
	rep := &paintFloor{Clicks: clicks}
	for i := 0; i < warmupClicks+clicks; i++ {
		// Drain what is left of the last click's frames.
		for drained := false; !drained; {
			select {
			case f := <-events:
				colourOf(f)
			default:
				drained = true
			}
		}
		t0 := time.Now()
		if err := mouse(input.DispatchMouseEventTypeMousePressed); err != nil {
			return rep, err
		}
		deadline := time.After(2 * time.Second)
		var got *screencastFrame
		for got == nil {
			select {
			case f := <-events:
				if colourOf(f) == want {
					got = &f
				}
			case <-deadline:
				got = &screencastFrame{}
			case <-ctx.Done():
				return rep, ctx.Err()
			}
		}
		if err := mouse(input.DispatchMouseEventTypeMouseReleased); err != nil {
			return rep, err
		}
		want = 3 - want
		if i >= warmupClicks {
			if got.at.IsZero() {
				rep.Missed++
			} else {
				arrivals = append(arrivals, ms(got.at.Sub(t0)))
				if !got.ts.IsZero() {
					swaps = append(swaps, ms(got.ts.Sub(t0)))
				}
			}
		}
		gap := time.Duration(clickGapMs-clickJitterMs+rand.IntN(2*clickJitterMs+1)) * time.Millisecond
		select {
		case <-time.After(gap):
		case <-ctx.Done():
			return rep, ctx.Err()
		}
	}
	rep.SwapP50Ms, rep.SwapP95Ms = r1(pct(swaps, 50)), r1(pct(swaps, 95))
	rep.ArriveP50Ms, rep.ArriveP95Ms = r1(pct(arrivals, 50)), r1(pct(arrivals, 95))
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func colourNear(px, c [3]int) bool {
	d := 0
	for i := range px {
		d += (px[i] - c[i]) * (px[i] - c[i])
	}
	return d < 40*40
}
