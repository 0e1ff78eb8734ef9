package signaling_test

import (
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/signaling"
	"github.com/tabcast/tabcast/core/wire"
)

// fakeAccess is the HTTP layer's grant as a test sets it.
type fakeAccess struct {
	mu          sync.Mutex
	view, input bool
	ch          chan struct{}
}

func newFakeAccess(view, input bool) *fakeAccess {
	return &fakeAccess{view: view, input: input, ch: make(chan struct{}, 1)}
}

func (a *fakeAccess) Changed() <-chan struct{} { return a.ch }

func (a *fakeAccess) CanView() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.view
}

func (a *fakeAccess) CanInput() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.input
}

func (a *fakeAccess) set(view, input bool) {
	a.mu.Lock()
	a.view, a.input = view, input
	a.mu.Unlock()
	select {
	case a.ch <- struct{}{}:
	default:
	}
}

// connectWithAccess connects an interactive Pion viewer that holds fa.
func connectWithAccess(t *testing.T, e *env, fa *fakeAccess) (*rtcViewer, *dcViewer, *grant) {
	t.Helper()
	e.viewer.Store(&signaling.Viewer{Name: "local", Input: true, Access: fa})
	dv := newDCViewer(t)
	v, w := connectViewerWith(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "vp8", "interactive": true}, dv.setup)
	if !w.Interactive {
		t.Fatalf("welcome %+v", w)
	}
	dv.waitOpen(t)
	g := grantOf(w)
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.TextInsert, Text: "before"}, nil))
	dv.expectAck(t, "", action.StatusAccepted, "")
	dv.expectAck(t, "", action.StatusCompleted, "")
	return v, dv, g
}

// TestAccessWithdrawnEndsTheConnection: when the viewer's access is
// withdrawn, it gets permission_denied, its producer ends, the peer closes
// and the socket closes with 4403, all within a second.
func TestAccessWithdrawnEndsTheConnection(t *testing.T) {
	e := newEnv(t, "vp8")
	fa := newFakeAccess(true, true)
	v, _, _ := connectWithAccess(t, e, fa)
	in := e.media.lastProducer()
	peerDown := make(chan webrtc.PeerConnectionState, 4)
	v.recv.PC.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s != webrtc.PeerConnectionStateConnected {
			select {
			case peerDown <- s:
			default:
			}
		}
	})
	start := time.Now()
	fa.set(false, false)
	f := v.next("error", time.Second, v.handle)
	if f.Code != errcode.PermissionDenied {
		t.Fatalf("error %+v", f)
	}
	if st := v.waitClosed(time.Second); st != signaling.ClosePermissionDenied {
		t.Errorf("close status %v, want %d", st, signaling.ClosePermissionDenied)
	}
	waitFor(t, time.Second, "the producer to end", func() bool { return in.closes.Load() == 1 })
	waitFor(t, time.Second, "the video to be released", func() bool { return e.media.releases.Load() == 1 })
	select {
	case s := <-peerDown:
		t.Logf("cut in %v (the viewer's peer went %s)", time.Since(start).Round(time.Millisecond), s)
	case <-time.After(time.Second):
		t.Error("the viewer's peer still connected a second after the withdrawal")
	}
}

// TestAccessNarrowedKeepsVideo: a viewer that may no longer act (role
// lowered) loses its producer, is told, and its input is refused with
// permission_denied; the video and the socket go on.
func TestAccessNarrowedKeepsVideo(t *testing.T) {
	e := newEnv(t, "vp8")
	fa := newFakeAccess(true, true)
	v, dv, g := connectWithAccess(t, e, fa)
	in := e.media.lastProducer()
	fa.set(true, false)
	f := v.next("error", time.Second, v.handle)
	if f.Code != errcode.PermissionDenied {
		t.Fatalf("error %+v", f)
	}
	waitFor(t, time.Second, "the producer to end", func() bool { return in.closes.Load() == 1 })
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.TextInsert, Text: "after"}, nil))
	dv.expectAck(t, "", action.StatusRejected, errcode.PermissionDenied)
	dv.sendRaw(t, wire.ChannelPointer, g.envelope(t, action.Action{Kind: action.PointerMove, X: 0.5, Y: 0.5}, nil))
	dv.expectAck(t, "", action.StatusRejected, errcode.PermissionDenied)
	// Submitted once (the text before), never after.
	in.next(t, time.Second)
	in.none(t)
	before, _ := v.recv.Counts()
	if _, err := v.recv.WaitFrames(before+10, 5*time.Second); err != nil {
		t.Errorf("video stopped: %v", err)
	}
	v.expectPong()
	if n := e.media.releases.Load(); n != 0 {
		t.Errorf("video released %d times", n)
	}
}

// TestAccessWithdrawnBeforeHello: a socket whose access is gone before its
// hello never gets a peer.
func TestAccessWithdrawnBeforeHello(t *testing.T) {
	e := newEnv(t, "vp8")
	e.viewer.Store(&signaling.Viewer{Name: "local", Input: true, Access: newFakeAccess(false, false)})
	c := dial(t, e.wsURL("s1"))
	c.expectError(errcode.PermissionDenied)
	if st := c.waitClosed(2 * time.Second); st != signaling.ClosePermissionDenied {
		t.Errorf("close status %v", st)
	}
	if n := e.media.subs.Load(); n != 0 {
		t.Errorf("%d subscriptions", n)
	}

	// Input already withdrawn at hello: the viewer watches, view only.
	e.viewer.Store(&signaling.Viewer{Name: "local", Input: true, Access: newFakeAccess(true, false)})
	v, w := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "vp8", "interactive": true})
	if w.Interactive || w.InputError != errcode.ViewOnly || e.media.inputCount() != 0 {
		t.Errorf("welcome %+v, %d inputs", w, e.media.inputCount())
	}
	v.expectPong()
}
