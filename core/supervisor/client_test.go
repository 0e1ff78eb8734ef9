package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

func TestDispenseNilHandleIsNil(t *testing.T) {
	if c := Dispense[capture.Capturer](nil); c != nil {
		t.Fatalf("Dispense(nil) = %v, want nil", c)
	}
}

// A client asked for the wrong contract is an error, not a panic; the
// right one (or the shared base contract) is served.
func TestClientWrongContract(t *testing.T) {
	s := supervise(t, testOptions(&syncBuffer{}))
	ctx := context.Background()
	h, err := s.Start(ctx, captureSpec("capture-typed", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, _, err := Dispense[encoder.Encoder](h).Get(ctx); !errors.Is(err, ErrWrongContract) ||
		!strings.Contains(err.Error(), "capture-typed") || !strings.Contains(err.Error(), "encoder.Encoder") {
		t.Fatalf("Get as an encoder: %v, want ErrWrongContract naming the plugin and contract", err)
	}
	called := false
	err = Dispense[encoder.Encoder](h).Call(ctx, func(encoder.Encoder) error { called = true; return nil })
	if !errors.Is(err, ErrWrongContract) || called {
		t.Fatalf("Call as an encoder: %v (fn called %v)", err, called)
	}
	if err := Dispense[base.Plugin](h).Call(ctx, func(p base.Plugin) error { return p.Ping(ctx) }); err != nil {
		t.Fatalf("Call as a base plugin: %v", err)
	}
	if c := Dispense[capture.Capturer](h); c.Name() != "capture-typed" || c.Handle() != h {
		t.Fatalf("Name %q Handle %p, want capture-typed %p", c.Name(), c.Handle(), h)
	}
}

// Call reports a broken plugin itself (one restart), and leaves a plugin
// that refused one request, or a caller whose ctx ended, alone.
func TestCallReportsBrokenPlugin(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	h, err := s.Start(context.Background(), captureSpec("capture-call", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c := Dispense[capture.Capturer](h)
	refused := status.Error(codes.InvalidArgument, "bad target")
	if err := c.Call(context.Background(), func(capture.Capturer) error { return refused }); err != refused {
		t.Fatalf("Call returned %v, want fn's error as is", err)
	}
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	gone := status.Error(codes.Unavailable, "connection refused")
	// Get fails on a dead ctx only while waiting; a running plugin is handed out.
	_ = c.Call(dead, func(capture.Capturer) error { return gone })
	time.Sleep(5 * testOptions(logs).BackoffMin)
	if st := h.Status(); st.Generation != 1 || st.Restarts != 0 {
		t.Fatalf("after a refused request and a cancelled caller: %+v, want no restart", st)
	}
	if err := c.Call(context.Background(), func(capture.Capturer) error { return fmt.Errorf("stream: %w", gone) }); !errors.Is(err, gone) {
		t.Fatalf("Call returned %v, want the wrapped Unavailable", err)
	}
	waitGen(t, h, 2, 5*time.Second)
}
