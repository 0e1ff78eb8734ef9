package ffenc

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

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

// decodeSamples decodes the samples with libavcodec's own decoder.
func decodeSamples(t testing.TB, codec string, samples []encoder.Sample) decoded {
	t.Helper()
	d, err := decode(codec, samples, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
