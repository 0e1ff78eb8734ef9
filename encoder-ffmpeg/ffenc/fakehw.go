package ffenc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asticode/go-astiav"
)

// FakeHWEnv is a TEST-ONLY hook: the run-time fallback from a failing
// hardware encoder cannot be exercised without a GPU, so when this
// variable is set the plugin registers EncoderFakeHW, a pseudo hardware
// H.264 encoder (libx264 underneath) that auto prefers over every other and
// that fails after a number of frames. Never set it in production.
//
// Its value is comma-separated key=value pairs:
//
//	fail-after=N        every opened instance fails on its frame N+1 (N ≥ 1,
//	                    so that the one-frame probe passes); required
//	reprobe-every=DUR   the re-probe interval after a failure (default 30s)
//	ok-file=PATH        the encoder opens only while PATH exists (a device
//	                    that comes and goes), so a test decides when a
//	                    re-probe passes
//
// Not TABCAST_*: the appliance refuses TABCAST_ variables that name no
// config key, and the plugin inherits the appliance's environment.
const FakeHWEnv = "TCTEST_ENCODER_FAKE_HW"

// EncoderFakeHW is the pseudo hardware encoder of FakeHWEnv.
const EncoderFakeHW = "fake_hw_h264"

// fakeHWConfig is FakeHWEnv parsed.
type fakeHWConfig struct {
	failAfter    int
	okFile       string
	reprobeEvery time.Duration
}

func parseFakeHW(v string) (fakeHWConfig, error) {
	c := fakeHWConfig{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return c, fmt.Errorf("%s: %q is not key=value", FakeHWEnv, kv)
		}
		var err error
		switch k {
		case "fail-after":
			c.failAfter, err = strconv.Atoi(val)
			if err == nil && c.failAfter < 1 {
				err = fmt.Errorf("want at least 1")
			}
		case "reprobe-every":
			c.reprobeEvery, err = time.ParseDuration(val)
			if err == nil && c.reprobeEvery <= 0 {
				err = fmt.Errorf("want a positive duration")
			}
		case "ok-file":
			c.okFile = val
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return c, fmt.Errorf("%s: %s=%s: %w", FakeHWEnv, k, val, err)
		}
	}
	if c.failAfter == 0 {
		return c, fmt.Errorf("%s: fail-after is required", FakeHWEnv)
	}
	return c, nil
}

// fakeHWEncoder is libx264 that fails like a lost device after failAfter
// frames.
type fakeHWEncoder struct {
	inner     *avEncoder
	failAfter int
	frames    int
}

func openFakeHW(s settings) (*fakeHWEncoder, []string, error) {
	if s.fakeOKFile != "" {
		if _, err := os.Stat(s.fakeOKFile); err != nil {
			return nil, nil, fmt.Errorf("opening %s: device gone (%s: %w)", EncoderFakeHW, FakeHWEnv, err)
		}
	}
	sw := s
	sw.encoder = EncoderX264
	inner, unused, err := openAV(sw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", EncoderFakeHW, err)
	}
	return &fakeHWEncoder{inner: inner, failAfter: s.fakeFailAfter}, unused, nil
}

func (e *fakeHWEncoder) encode(f *astiav.Frame, pts int64, key bool, emit func(data []byte, key bool)) error {
	if f != nil {
		if e.frames >= e.failAfter {
			return fmt.Errorf("sending a frame: %w (%s: injected after %d frames)", astiav.ErrEio, FakeHWEnv, e.failAfter)
		}
		e.frames++
	}
	return e.inner.encode(f, pts, key, emit)
}

func (e *fakeHWEncoder) close() { e.inner.close() }
