package capture

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
)

type fakeCapturer struct{}

func (fakeCapturer) Info(context.Context) (base.Info, error)           { return base.Info{Name: "fake"}, nil }
func (fakeCapturer) ConfigSchema(context.Context) (base.Schema, error) { return base.Schema{}, nil }
func (fakeCapturer) SetConfig(context.Context, []byte) error           { return nil }
func (fakeCapturer) Ping(context.Context) error                        { return nil }
func (fakeCapturer) Shutdown(context.Context) error                    { return nil }
func (fakeCapturer) ChromiumFlags(context.Context) ([]string, error)   { return nil, nil }
func (fakeCapturer) Stream(context.Context, Target, func(Frame) error) error {
	return nil
}

type fakeController struct {
	fakeCapturer
	got     []StreamControl
	session string
}

func (f *fakeController) Control(_ context.Context, session string, c StreamControl) error {
	if session == "missing" {
		return errors.New("no such stream")
	}
	f.session = session
	f.got = append(f.got, c)
	return nil
}

func dispense(t *testing.T, impl Capturer) *Client {
	t.Helper()
	client, server := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{plugins.KindCapture: &Plugin{Impl: impl}})
	t.Cleanup(func() { client.Close(); server.Stop() })
	raw, err := client.Dispense(plugins.KindCapture)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*Client)
}

// TestControlOptional: Control is forwarded to plugins that implement
// Controller and answers Unimplemented for the others (e.g. capture-cdp).
func TestControlOptional(t *testing.T) {
	ctx := context.Background()
	err := dispense(t, fakeCapturer{}).Control(ctx, "s", StreamControl{Keyframe: true})
	if !IsUnimplemented(err) {
		t.Fatalf("Control on a plugin without Controller = %v, want Unimplemented", err)
	}
	f := &fakeController{}
	c := dispense(t, f)
	want := StreamControl{Keyframe: true, MaxBitrateKbps: 1200, MaxFPS: 15}
	if err := c.Control(ctx, "s1", want); err != nil {
		t.Fatal(err)
	}
	if f.session != "s1" || len(f.got) != 1 || f.got[0] != want {
		t.Fatalf("forwarded %q %+v", f.session, f.got)
	}
	if err := c.Control(ctx, "missing", want); err == nil || IsUnimplemented(err) {
		t.Fatalf("Control error = %v, want the plugin's error", err)
	}
}

type busyCapturer struct{ fakeCapturer }

func (busyCapturer) Stream(_ context.Context, t Target, _ func(Frame) error) error {
	return AlreadyStreaming(t.SessionID)
}

// TestAlreadyStreamingCrossesTheBoundary: a plugin's "still streaming this
// session" reaches the host as itself (a retry, not a capture failure);
// other errors do not read as it.
func TestAlreadyStreamingCrossesTheBoundary(t *testing.T) {
	err := dispense(t, busyCapturer{}).Stream(context.Background(), Target{SessionID: "s1"}, func(Frame) error { return nil })
	if !IsAlreadyStreaming(err) {
		t.Fatalf("Stream error %v, want IsAlreadyStreaming", err)
	}
	if IsAlreadyStreaming(errors.New("capture-tab: session \"s1\" is already streaming")) || IsAlreadyStreaming(nil) {
		t.Fatal("a plain error reads as AlreadyStreaming")
	}
}
