package encoder

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
)

// fakeEncoder opens streams on "hw" that go over to "sw" on frame switchAt.
type fakeEncoder struct{ switchAt uint64 }

func (fakeEncoder) Info(context.Context) (base.Info, error)           { return base.Info{Name: "fake"}, nil }
func (fakeEncoder) ConfigSchema(context.Context) (base.Schema, error) { return base.Schema{}, nil }
func (fakeEncoder) SetConfig(context.Context, []byte) error           { return nil }
func (fakeEncoder) Ping(context.Context) error                        { return nil }
func (fakeEncoder) Shutdown(context.Context) error                    { return nil }
func (fakeEncoder) Capabilities(context.Context) ([]Probe, error) {
	return []Probe{{Encoder: "hw", Codec: CodecH264, Hardware: true, Error: "failed at run time: boom", Duration: time.Millisecond}}, nil
}

func (f fakeEncoder) Open(_ context.Context, p OpenParams) (Stream, error) {
	s := &fakeStream{switchAt: f.switchAt}
	s.opened = Opened{Encoder: "hw", Codec: p.Codec, Hardware: true}
	return s, nil
}

type fakeStream struct {
	mu       sync.Mutex
	switchAt uint64
	opened   Opened
}

func (s *fakeStream) Opened() Opened {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

func (s *fakeStream) Encode(f InputFrame) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Result{Seq: f.Seq, Samples: []Sample{{Data: []byte{byte(f.Seq)}, Keyframe: f.Seq == s.switchAt, Duration: time.Millisecond, CaptureTime: f.CaptureTime}}}
	if f.Seq == s.switchAt {
		s.opened = Opened{Encoder: "sw", Codec: s.opened.Codec, FallbackFrom: "hw", FallbackReason: "boom"}
		o := s.opened
		r.Opened = &o
	}
	return r, nil
}

func (s *fakeStream) Control(Control) error { return nil }
func (s *fakeStream) Close() error          { return nil }

// TestFallbackRoundTrip: a run-time encoder change reaches the host on the
// result of the frame it happened on, and Opened follows it.
func TestFallbackRoundTrip(t *testing.T) {
	client, server := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{plugins.KindEncoder: &Plugin{Impl: fakeEncoder{switchAt: 3}}})
	t.Cleanup(func() { client.Close(); server.Stop() })
	raw, err := client.Dispense(plugins.KindEncoder)
	if err != nil {
		t.Fatal(err)
	}
	enc := raw.(*Client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	probes, err := enc.Capabilities(ctx)
	if err != nil || len(probes) != 1 || probes[0].OK || probes[0].Error != "failed at run time: boom" {
		t.Fatalf("capabilities %+v %v", probes, err)
	}
	s, err := enc.Open(ctx, OpenParams{Codec: CodecH264, Width: 64, Height: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hw := Opened{Encoder: "hw", Codec: CodecH264, Hardware: true}
	sw := Opened{Encoder: "sw", Codec: CodecH264, FallbackFrom: "hw", FallbackReason: "boom"}
	if s.Opened() != hw {
		t.Fatalf("opened %+v", s.Opened())
	}
	// Opened is read by stats while Encode runs (go test -race).
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = s.Opened()
			}
		}
	}()
	defer func() { close(stop); readers.Wait() }()
	at := time.Unix(1700000000, 0)
	for seq := uint64(1); seq <= 5; seq++ {
		r, err := s.Encode(InputFrame{JPEG: []byte{1}, CaptureTime: at, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case seq < 3 && (r.Opened != nil || s.Opened() != hw):
			t.Fatalf("frame %d before the switch: result opened %+v, stream %+v", seq, r.Opened, s.Opened())
		case seq == 3 && (r.Opened == nil || *r.Opened != sw || s.Opened() != sw || !r.Samples[0].Keyframe):
			t.Fatalf("frame %d, the switch: result opened %+v, stream %+v", seq, r.Opened, s.Opened())
		case seq > 3 && (r.Opened != nil || s.Opened() != sw):
			t.Fatalf("frame %d after the switch: result opened %+v, stream %+v", seq, r.Opened, s.Opened())
		}
	}
}
