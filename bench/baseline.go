package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tabcast/tabcast/encoder-ffmpeg/ffenc"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// baselineFrames is how many screencast JPEGs both encoders get; several
// hundred amortise the CLI's start-up.
const baselineFrames = 300

// cliBaseline encodes the same real screencast JPEGs in this process (our
// encoder package) and through the ffmpeg CLI with the same settings, and
// fills in the CPU cost per frame and the ratio for each codec.
func cliBaseline(ctx context.Context, pageURL string, rs []codecResult) error {
	jpegs, err := screencastJPEGs(ctx, pageURL, 100)
	if err != nil {
		return err
	}
	frames := make([][]byte, 0, baselineFrames)
	for len(frames) < baselineFrames {
		frames = append(frames, jpegs...)
	}
	frames = frames[:baselineFrames]
	cfg := ffenc.DefaultConfig()
	for i := range rs {
		p := encoder.OpenParams{Codec: rs[i].Codec, Width: 1280, Height: 720, FPS: 24, BitrateKbps: 2500, KeyframeInterval: 2 * time.Second}
		own, err := ffenc.OwnEncodeCost(ctx, frames, p, cfg)
		if err != nil {
			return fmt.Errorf("%s own: %w", rs[i].Codec, err)
		}
		cli, err := ffenc.CLIEncodeCost(ctx, frames, p, cfg)
		if err != nil {
			return fmt.Errorf("%s CLI: %w", rs[i].Codec, err)
		}
		rs[i].OwnMsPerFrame = float64(own.Microseconds()) / 1000
		rs[i].CLIMsPerFrame = float64(cli.Microseconds()) / 1000
		if cli > 0 {
			rs[i].OwnToCLIPercent = 100 * float64(own) / float64(cli)
		}
	}
	return nil
}

// screencastJPEGs captures n real screencast frames of pageURL at 1280x720.
func screencastJPEGs(ctx context.Context, pageURL string, n int) ([][]byte, error) {
	bctx, done, err := openPage(pageURL)
	if err != nil {
		return nil, err
	}
	defer done()
	events, err := startScreencast(bctx)
	if err != nil {
		return nil, err
	}
	frames := make(chan []byte, n)
	go func() {
		for {
			select {
			case <-bctx.Done():
				return
			case f := <-events:
				ackScreencast(bctx, f)
				select {
				case frames <- f.jpeg:
				default:
				}
			}
		}
	}()
	out := make([][]byte, 0, n)
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case b := <-frames:
			out = append(out, b)
		case <-timeout:
			return nil, fmt.Errorf("captured %d of %d frames", len(out), n)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}
