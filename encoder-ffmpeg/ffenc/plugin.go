// Package ffenc is the encoder-ffmpeg plugin: screencast JPEGs decoded with
// libavcodec's mjpeg decoder, converted with swscale when needed, and
// encoded to H.264 (libx264, or h264_vaapi / h264_nvenc when a start-up
// probe found them working) or VP8 (libvpx, or vp8_vaapi where the driver
// has it), through go-astiav.
//
// A hardware encoder that fails while a stream runs (encode, upload or
// reopen) is replaced by software (libx264, libvpx) for the rest of that stream, from the
// failing frame on, which is encoded again as a keyframe; the result of
// that frame reports the switch (encoder.Result.Opened). The hardware
// encoder is then marked failed for new streams and re-probed in the
// background, at most every DefaultReprobeEvery, until it passes.
package ffenc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/asticode/go-astiav"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// Plugin identity.
const (
	Name    = "encoder-ffmpeg"
	Version = "0.1.0"
)

// Defaults for OpenParams left at zero.
const (
	DefaultFPS              = 24
	DefaultBitrateKbps      = 2500
	DefaultKeyframeInterval = 2 * time.Second
)

// DefaultReprobeEvery is the least time between two probes of a hardware
// encoder that failed: a probe costs a device open and an encode, and a
// device that just failed seldom comes back within seconds.
const DefaultReprobeEvery = 30 * time.Second

// maxProbeError bounds a probe's error text (FFmpeg's log lines included).
const maxProbeError = 600

// Plugin implements encoder.Encoder.
type Plugin struct {
	// Lifecycle serves ConfigSchema, SetConfig (strict decoding over the
	// defaults), Ping and Shutdown (closeAll).
	*base.Lifecycle[Config]
	log *slog.Logger
	// renderNodes is the glob of VAAPI render nodes (a field for tests).
	renderNodes string

	// fakeHW is the test-only fake hardware encoder (FakeHWEnv), nil
	// unless enabled.
	fakeHW *fakeHWConfig
	// reprobeEvery is the re-probe interval of a failed hardware encoder
	// (a field for tests).
	reprobeEvery time.Duration

	// bg is the context of the re-probes; Shutdown cancels it and waits.
	bg     context.Context
	bgStop context.CancelFunc
	bgWG   sync.WaitGroup

	mu      sync.Mutex
	cfg     Config
	streams map[*stream]struct{}
	down    bool
	probes  []encoder.Probe      // under mu once probeOnce has run
	hw      map[string]*hwHealth // hardware encoders that failed after their probe

	probeOnce sync.Once
}

// hwHealth is a hardware encoder's record after it failed at run time.
type hwHealth struct {
	failures  int    // so far; a probe started before the last one does not count
	reason    string // the last failure
	reprobing bool   // a re-probe loop runs
	reprobes  int    // re-probes run so far
}

var _ encoder.Encoder = (*Plugin)(nil)

// New returns the plugin with the default config. FFmpeg's log is routed
// to log from here on.
func New(log *slog.Logger) *Plugin {
	installFFmpegLog(log)
	bg, stop := context.WithCancel(context.Background())
	p := &Plugin{
		log:          log,
		renderNodes:  "/dev/dri/renderD*",
		reprobeEvery: DefaultReprobeEvery,
		bg:           bg,
		bgStop:       stop,
		cfg:          DefaultConfig(),
		streams:      map[*stream]struct{}{},
		hw:           map[string]*hwHealth{},
	}
	p.Lifecycle = base.NewLifecycle(base.LifecycleSpec[Config]{
		Info:       base.Info{Name: Name, Version: Version, Kind: plugins.KindEncoder, APIVersion: 1},
		Schema:     configJSONSchema,
		Defaults:   DefaultConfig,
		Apply:      p.applyConfig,
		OnShutdown: p.closeAll,
	})
	if v := os.Getenv(FakeHWEnv); v != "" {
		c, err := parseFakeHW(v)
		if err != nil {
			log.Error("test hook ignored", "error", err)
		} else {
			p.enableFakeHW(c)
		}
	}
	return p
}

// enableFakeHW registers the test-only fake hardware encoder; call it
// before the first probe.
func (p *Plugin) enableFakeHW(c fakeHWConfig) {
	p.fakeHW = &c
	if c.reprobeEvery > 0 {
		p.reprobeEvery = c.reprobeEvery
	}
	p.log.Warn("TEST HOOK: fake hardware encoder enabled", "env", FakeHWEnv, "encoder", EncoderFakeHW,
		"failAfter", c.failAfter, "okFile", c.okFile, "reprobeEvery", p.reprobeEvery)
}

// Info is the lifecycle's, with each encoder's probe result as a
// capability ("ok" or why it does not open).
func (p *Plugin) Info(ctx context.Context) (base.Info, error) {
	info, err := p.Lifecycle.Info(ctx)
	caps := map[string]string{}
	for _, pr := range p.probeResults() {
		if pr.OK {
			caps[pr.Encoder] = "ok"
		} else {
			caps[pr.Encoder] = pr.Error
		}
	}
	info.Capabilities = caps
	return info, err
}

// applyConfig (SetConfig, after strict decoding over the defaults) replaces
// the config; streams opened before keep theirs.
func (p *Plugin) applyConfig(_ context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	p.cfg = c
	p.mu.Unlock()
	return nil
}

// closeAll (Shutdown) closes every open stream, refuses new ones and stops
// the re-probes.
func (p *Plugin) closeAll(context.Context) error {
	p.mu.Lock()
	p.down = true
	open := make([]*stream, 0, len(p.streams))
	for s := range p.streams {
		open = append(open, s)
	}
	p.mu.Unlock()
	for _, s := range open {
		_ = s.Close()
	}
	p.bgStop()
	p.bgWG.Wait()
	return nil
}

// OpenStreams is the number of streams not closed yet.
func (p *Plugin) OpenStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

func (p *Plugin) Capabilities(context.Context) ([]encoder.Probe, error) {
	return p.probeResults(), nil
}

// probeResults returns the probe results, probing on the first call.
func (p *Plugin) probeResults() []encoder.Probe {
	p.probeOnce.Do(p.probe)
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]encoder.Probe(nil), p.probes...)
}

// hwFailed records that a hardware encoder failed after its probe passed
// (while opening or encoding): new streams stop using it, and a re-probe
// in the background brings it back once it passes. Streams that already
// went over to software stay there.
func (p *Plugin) hwFailed(name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hw[name]
	if h == nil {
		h = &hwHealth{}
		p.hw[name] = h
	}
	h.failures++
	h.reason = err.Error()
	p.setProbeLocked(encoder.Probe{Encoder: name, Hardware: true, Error: "failed at run time: " + h.reason})
	if h.reprobing || p.down {
		return
	}
	h.reprobing = true
	p.bgWG.Add(1)
	go p.reprobe(name)
}

// setProbeLocked replaces name's probe result; a zero Codec or Duration
// keeps the previous one.
func (p *Plugin) setProbeLocked(pr encoder.Probe) {
	if len(pr.Error) > maxProbeError {
		pr.Error = pr.Error[:maxProbeError] + "…"
	}
	for i := range p.probes {
		if p.probes[i].Encoder != pr.Encoder {
			continue
		}
		if pr.Codec == "" {
			pr.Codec = p.probes[i].Codec
		}
		if pr.Duration == 0 {
			pr.Duration = p.probes[i].Duration
		}
		p.probes[i] = pr
	}
}

// reprobe probes a failed hardware encoder every reprobeEvery until it
// passes or the plugin shuts down. Waiting before each probe bounds the
// probes of one encoder to one per interval, however often streams fail.
func (p *Plugin) reprobe(name string) {
	defer p.bgWG.Done()
	t := time.NewTimer(p.reprobeEvery)
	defer t.Stop()
	for {
		select {
		case <-p.bg.Done():
			p.mu.Lock()
			p.hw[name].reprobing = false
			p.mu.Unlock()
			return
		case <-t.C:
		}
		p.mu.Lock()
		h := p.hw[name]
		failures := h.failures
		h.reprobes++
		p.mu.Unlock()
		pr := p.probeOne(name, true)
		p.mu.Lock()
		switch {
		case pr.OK && h.failures == failures:
			p.setProbeLocked(pr)
			h.reprobing = false
			p.mu.Unlock()
			p.log.Info("hardware encoder passed its re-probe: new streams use it again", "encoder", name, "duration", pr.Duration)
			return
		case pr.OK:
			// It failed again while this probe ran: that failure stands.
		default:
			pr.Error = "failed at run time: " + h.reason + "; re-probe: " + pr.Error
			p.setProbeLocked(pr)
		}
		p.mu.Unlock()
		if !pr.OK {
			p.log.Warn("hardware encoder failed its re-probe", "encoder", name, "error", pr.Error, "next", p.reprobeEvery)
		}
		t.Reset(p.reprobeEvery)
	}
}

func openFailed(format string, args ...any) error {
	return &encoder.Error{Code: "open_failed", Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &encoder.Error{Code: "bad_request", Message: fmt.Sprintf(format, args...)}
}

// Open opens a stream. Zero FPS, bitrate and keyframe interval take the
// defaults; an empty Hardware takes the config's.
func (p *Plugin) Open(ctx context.Context, op encoder.OpenParams) (encoder.Stream, error) {
	p.mu.Lock()
	cfg, down := p.cfg, p.down
	p.mu.Unlock()
	if down {
		return nil, openFailed("plugin shut down")
	}
	op, set, err := settingsFor(op, cfg)
	if err != nil {
		return nil, err
	}
	if set.encoder, set.device, err = p.pick(op.Codec, op.Hardware); err != nil {
		return nil, err
	}
	if set.encoder == EncoderFakeHW {
		set.fakeFailAfter, set.fakeOKFile = p.fakeHW.failAfter, p.fakeHW.okFile
	}
	s, err := newStream(p.log, set, op.KeyframeInterval)
	if err != nil && set.hardware() {
		// The probe passed but this open did not (a busy or lost device):
		// new streams stop using it until a re-probe passes.
		p.hwFailed(set.encoder, fmt.Errorf("opening: %w", err))
		if op.Hardware == HardwareAuto {
			// auto means software will do.
			sw := set.software()
			p.log.Warn("hardware encoder failed to open, using software", "encoder", set.encoder, "software", sw.encoder, "error", err)
			set = sw
			s, err = newStream(p.log, set, op.KeyframeInterval)
		}
	}
	if err != nil {
		return nil, openFailed("%v", err)
	}
	s.onHWFail = p.hwFailed
	s.onDone = func() {
		p.mu.Lock()
		delete(p.streams, s)
		p.mu.Unlock()
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = s.Close()
		return nil, openFailed("plugin shut down")
	}
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	s.closeWith(ctx)
	p.log.Info("stream opened", "encoder", set.encoder, "size", fmt.Sprintf("%dx%d", set.width, set.height),
		"fps", set.fps, "bitrateKbps", set.bitrateKbps, "keyint", set.keyint)
	return s, nil
}

// settingsFor applies the defaults to op, validates it and returns the
// software encoder settings for it (pick may swap in hardware).
func settingsFor(op encoder.OpenParams, cfg Config) (encoder.OpenParams, settings, error) {
	if op.FPS == 0 {
		op.FPS = DefaultFPS
	}
	if op.BitrateKbps == 0 {
		op.BitrateKbps = DefaultBitrateKbps
	}
	if op.KeyframeInterval == 0 {
		op.KeyframeInterval = DefaultKeyframeInterval
	}
	if op.Hardware == "" {
		op.Hardware = cfg.Hardware
	}
	switch {
	case op.Codec != encoder.CodecH264 && op.Codec != encoder.CodecVP8:
		return op, settings{}, badRequest("codec %q is not h264 or vp8", op.Codec)
	case op.Width < 16 || op.Height < 16 || op.Width > 4096 || op.Height > 4096 || op.Width%2 != 0 || op.Height%2 != 0:
		return op, settings{}, badRequest("size %dx%d: want even sides in [16, 4096]", op.Width, op.Height)
	case op.FPS < MinFPS || op.FPS > MaxFPS:
		return op, settings{}, badRequest("fps %d not in [%d, %d]", op.FPS, MinFPS, MaxFPS)
	case op.BitrateKbps < MinBitrateKbps || op.BitrateKbps > MaxBitrateKbps:
		return op, settings{}, badRequest("bitrate %d kbps not in [%d, %d]", op.BitrateKbps, MinBitrateKbps, MaxBitrateKbps)
	case op.KeyframeInterval < 100*time.Millisecond || op.KeyframeInterval > time.Minute:
		return op, settings{}, badRequest("keyframe interval %v not in [100ms, 1m]", op.KeyframeInterval)
	}
	set := settings{
		encoder: EncoderX264, width: op.Width, height: op.Height, fps: op.FPS, bitrateKbps: op.BitrateKbps,
		keyint: keyint(op.FPS, op.KeyframeInterval), threads: cfg.Threads,
		h264Preset: cfg.H264Preset, vp8CPUUsed: cfg.VP8CPUUsed,
	}
	if op.Codec == encoder.CodecVP8 {
		set.encoder = EncoderVPX
	}
	return op, set, nil
}

// pick chooses the encoder (and VAAPI device) for a codec and hardware mode.
func (p *Plugin) pick(codec, hw string) (name, device string, err error) {
	switch hw {
	case HardwareAuto, HardwareOff, HardwareVAAPI, HardwareNVENC:
	default:
		return "", "", badRequest("hardware %q is not one of auto, off, vaapi, nvenc", hw)
	}
	soft := EncoderX264
	if codec == encoder.CodecVP8 {
		soft = EncoderVPX
	}
	var want string
	switch hw {
	case HardwareOff:
		return soft, "", nil
	case HardwareVAAPI:
		want = map[string]string{encoder.CodecH264: EncoderVAAPI, encoder.CodecVP8: EncoderVAAPIVP8}[codec]
	case HardwareNVENC:
		if codec == encoder.CodecVP8 {
			return "", "", openFailed("no nvenc encoder for vp8")
		}
		want = EncoderNVENC
	}
	for _, pr := range p.probeResults() {
		if !pr.Hardware || pr.Codec != codec || (want != "" && pr.Encoder != want) {
			continue
		}
		if pr.OK {
			return pr.Encoder, p.device(pr.Encoder), nil
		}
		if want != "" {
			return "", "", openFailed("%s unavailable: %s", want, pr.Error)
		}
	}
	if want != "" {
		return "", "", openFailed("%s was not probed", want)
	}
	return soft, "", nil
}

func (p *Plugin) device(name string) string {
	if !isVAAPI(name) {
		return ""
	}
	nodes, _ := filepath.Glob(p.renderNodes)
	if len(nodes) == 0 {
		return ""
	}
	return nodes[0]
}

// probe tries every encoder for real, once: H.264 hardware first (the
// order auto prefers, the test-only fake before the real ones), then the
// software encoders, then VP8 on VAAPI (auto picks within a codec).
func (p *Plugin) probe() {
	var ps []encoder.Probe
	if p.fakeHW != nil {
		ps = append(ps, p.probeOne(EncoderFakeHW, true))
	}
	ps = append(ps,
		p.probeOne(EncoderVAAPI, true),
		p.probeOne(EncoderNVENC, true),
		p.probeOne(EncoderX264, false),
		p.probeOne(EncoderVPX, false),
		p.probeOne(EncoderVAAPIVP8, true),
	)
	for _, pr := range ps {
		if pr.OK {
			p.log.Info("encoder probe ok", "encoder", pr.Encoder, "duration", pr.Duration)
		} else {
			p.log.Warn("encoder unavailable", "encoder", pr.Encoder, "error", pr.Error, "duration", pr.Duration)
		}
	}
	p.mu.Lock()
	p.probes = ps
	p.mu.Unlock()
}

func (p *Plugin) probeOne(name string, hw bool) encoder.Probe {
	set := settings{
		encoder: name, width: 320, height: 240, fps: 24, bitrateKbps: 500, keyint: 48,
		threads: 1, h264Preset: "ultrafast", vp8CPUUsed: -8,
	}
	if name == EncoderFakeHW {
		set.fakeFailAfter, set.fakeOKFile = p.fakeHW.failAfter, p.fakeHW.okFile
	}
	pr := encoder.Probe{Encoder: name, Codec: set.codec(), Hardware: hw}
	start := time.Now()
	if isVAAPI(name) {
		if set.device = p.device(name); set.device == "" {
			pr.Error = "no VAAPI render node (" + p.renderNodes + ")"
			pr.Duration = time.Since(start)
			return pr
		}
	}
	var err error
	lines := collectFFmpegLog(func() { err = encodeOneFrame(set) })
	if err != nil {
		msg := err.Error()
		if len(lines) > 0 {
			msg += "; ffmpeg: " + strings.Join(lines, " | ")
		}
		if len(msg) > maxProbeError {
			msg = msg[:maxProbeError] + "…"
		}
		pr.Error = msg
	} else {
		pr.OK = true
	}
	pr.Duration = time.Since(start)
	return pr
}

// encodeOneFrame opens the encoder and encodes one grey frame, flushing
// until a packet comes out.
func encodeOneFrame(set settings) error {
	enc, _, err := openEncoder(set)
	if err != nil {
		return err
	}
	defer enc.close()
	f := astiav.AllocFrame()
	defer f.Free()
	f.SetWidth(set.width)
	f.SetHeight(set.height)
	f.SetPixelFormat(set.pixelFormat())
	if err := f.AllocBuffer(0); err != nil {
		return fmt.Errorf("allocating a frame: %w", err)
	}
	if err := f.ImageFillBlack(); err != nil {
		return fmt.Errorf("filling a frame: %w", err)
	}
	packets := 0
	emit := func([]byte, bool) { packets++ }
	if err := enc.encode(f, 0, true, emit); err != nil {
		return err
	}
	if err := enc.encode(nil, 0, false, emit); err != nil {
		return err
	}
	if packets == 0 {
		return errors.New("no packet out of one frame")
	}
	return nil
}
