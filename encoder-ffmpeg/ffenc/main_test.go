package ffenc

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/asticode/go-astiav"
	"github.com/tabcast/tabcast/plugins/encoder"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fx.dir != "" {
		_ = os.RemoveAll(fx.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testLog is shared by every plugin of the run: FFmpeg's log routing is
// process-global and outlives single tests.
var testLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// decoded is what libavcodec made of an encoded stream.
type decoded struct {
	frames        int
	width, height int
	colorRange    astiav.ColorRange
	colorSpace    astiav.ColorSpace
	// lumaAvg is the mean Y of the last frame.
	lumaAvg float64
}

// decodeSamples decodes the samples with libavcodec's own decoder.
func decodeSamples(t testing.TB, codec string, samples []encoder.Sample) decoded {
	t.Helper()
	id := astiav.CodecIDH264
	if codec == encoder.CodecVP8 {
		id = astiav.CodecIDVp8
	}
	c := astiav.FindDecoder(id)
	cc := astiav.AllocCodecContext(c)
	defer cc.Free()
	cc.SetThreadCount(1)
	if err := cc.Open(c, nil); err != nil {
		t.Fatalf("opening the %s decoder: %v", codec, err)
	}
	pkt := astiav.AllocPacket()
	defer pkt.Free()
	f := astiav.AllocFrame()
	defer f.Free()
	var d decoded
	drain := func() {
		for {
			err := cc.ReceiveFrame(f)
			if errors.Is(err, astiav.ErrEagain) || errors.Is(err, astiav.ErrEof) {
				return
			}
			if err != nil {
				t.Fatalf("decoding: %v", err)
			}
			d.frames++
			d.width, d.height, d.colorRange, d.colorSpace = f.Width(), f.Height(), f.ColorRange(), cc.ColorSpace()
			buf := make([]byte, 0)
			n, err := f.ImageBufferSize(1)
			if err == nil {
				buf = make([]byte, n)
				if _, err := f.ImageCopyToBuffer(buf, 1); err == nil {
					sum := 0
					for _, v := range buf[:f.Width()*f.Height()] {
						sum += int(v)
					}
					d.lumaAvg = float64(sum) / float64(f.Width()*f.Height())
				}
			}
			f.Unref()
		}
	}
	for i, s := range samples {
		if err := pkt.FromData(append(append([]byte(nil), s.Data...), make([]byte, inputPadding)...)); err != nil {
			t.Fatal(err)
		}
		pkt.SetSize(len(s.Data))
		err := cc.SendPacket(pkt)
		pkt.Unref()
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		drain()
	}
	if err := cc.SendPacket(nil); err != nil {
		t.Fatal(err)
	}
	drain()
	return d
}
