package ffenc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/tabcast/tabcast/plugins/encoder"
)

// Encode cost, ours against the ffmpeg CLI's, for benchmarks.
//
// Both functions take the same arguments and return CPU time (user + system)
// per frame for the whole JPEG → encoded path with the same encoder
// settings: what OpenParams p and Config cfg give a software stream (p's
// Hardware is ignored). Frames are timed at a constant p.FPS in both, so rate
// control behaves the same. CLIEncodeCost measures the ffmpeg process (from
// its ProcessState: decoder, swscale, encoder, demuxer, process start);
// OwnEncodeCost measures this process with getrusage(RUSAGE_SELF) around the
// Encode calls (includes Go's GC and anything else the process runs, so
// call it from an otherwise idle benchmark). Compare them as
// own/CLI; pass a few hundred frames so the CLI's start-up is amortised.

// CLIEncodeCost runs the ffmpeg CLI over jpegs (image2pipe on stdin, output
// discarded) and returns its CPU time per frame.
func CLIEncodeCost(ctx context.Context, jpegs [][]byte, p encoder.OpenParams, cfg Config) (time.Duration, error) {
	if len(jpegs) == 0 {
		return 0, errors.New("no frames")
	}
	p.Hardware = HardwareOff
	_, set, err := settingsFor(p, cfg)
	if err != nil {
		return 0, err
	}
	args := []string{"-hide_banner", "-loglevel", "error", "-threads", "1",
		"-f", "image2pipe", "-c:v", "mjpeg", "-framerate", strconv.Itoa(set.fps), "-i", "-"}
	if jc, err := jpeg.DecodeConfig(bytes.NewReader(jpegs[0])); err != nil || jc.Width != set.width || jc.Height != set.height {
		args = append(args, "-vf", fmt.Sprintf("scale=%d:%d:flags=bilinear", set.width, set.height))
	}
	args = append(args, "-an", "-c:v", set.encoder, "-pix_fmt", set.pixelFormat().String())
	for _, o := range set.options() {
		if o.key == "ticks_per_frame" { // the CLI's time base is already 1/fps
			continue
		}
		args = append(args, "-"+o.key+":v", o.value)
	}
	args = append(args, "-f", "null", "-")

	cmd := exec.CommandContext(ctx, "ffmpeg", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting ffmpeg: %w", err)
	}
	// The writer ends when every frame is written or ffmpeg closed its
	// stdin (it exited); Wait below waits for it through done.
	done := make(chan error, 1)
	go func() {
		var werr error
		for _, j := range jpegs {
			if _, werr = stdin.Write(j); werr != nil {
				break
			}
		}
		_ = stdin.Close()
		done <- werr
	}()
	werr := <-done
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("ffmpeg %v: %w: %s", args, err, stderr.String())
	}
	if werr != nil {
		return 0, fmt.Errorf("feeding ffmpeg: %w", werr)
	}
	st := cmd.ProcessState
	return (st.UserTime() + st.SystemTime()) / time.Duration(len(jpegs)), nil
}

// OwnEncodeCost encodes jpegs with this package's pipeline and returns this
// process's CPU time per frame.
func OwnEncodeCost(ctx context.Context, jpegs [][]byte, p encoder.OpenParams, cfg Config) (time.Duration, error) {
	if len(jpegs) == 0 {
		return 0, errors.New("no frames")
	}
	p.Hardware = HardwareOff
	op, set, err := settingsFor(p, cfg)
	if err != nil {
		return 0, err
	}
	s, err := newStream(slog.New(slog.NewTextHandler(io.Discard, nil)), set, op.KeyframeInterval)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	t0 := time.Now()
	before, err := cpuTime()
	if err != nil {
		return 0, err
	}
	for i, j := range jpegs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		at := t0.Add(time.Duration(i) * time.Second / time.Duration(set.fps))
		if _, err := s.Encode(encoder.InputFrame{JPEG: j, CaptureTime: at, Seq: uint64(i)}); err != nil {
			return 0, fmt.Errorf("frame %d: %w", i, err)
		}
	}
	after, err := cpuTime()
	if err != nil {
		return 0, err
	}
	return (after - before) / time.Duration(len(jpegs)), nil
}

// cpuTime is this process's user + system CPU time.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
