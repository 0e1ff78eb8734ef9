package signaling_test

import (
	"context"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/viewer"
	"github.com/tabcast/tabcast/core/wire"
)

// instantExec completes every action at once on a page that never changes.
type instantExec struct{}

func (instantExec) Execute(context.Context, string, action.Action) (action.Result, error) {
	return action.Result{PageRevision: 1}, nil
}

func (instantExec) PageRevision() uint64 { return 1 }

// dispatchProducer is a producer on a real dispatcher, granted as a session
// grants one (core/session Producer): the grant stamps the envelopes.
type dispatchProducer struct {
	d     *dispatch.Dispatcher
	grant dispatch.Grant
}

func (in *dispatchProducer) Grant() (string, uint64) { return in.grant.ID, in.grant.Generation }
func (in *dispatchProducer) PageRevision() uint64    { return 1 }
func (in *dispatchProducer) Close()                  { in.d.End(in.grant.ID) }

func (in *dispatchProducer) Submit(e action.Envelope, reply func(action.Ack)) {
	e.ProducerID, e.ProducerGeneration = in.grant.ID, in.grant.Generation
	in.d.Submit(e, reply)
}

// TestRateLimitedAckReachesViewer: the dispatcher's rate_limited refusal
// reaches the viewer over the real control DataChannel with retryAfterMs,
// which says when the producer's next credit is due (the panel waits that
// long instead of guessing).
func TestRateLimitedAckReachesViewer(t *testing.T) {
	e := newEnv(t, "vp8")
	// One action of credit, then one every 4 s: the second action is refused.
	d := dispatch.New(dispatch.Config{Burst: 1, RatePerSec: 0.25}, instantExec{})
	t.Cleanup(d.Close)
	e.media.openProducer = func(r viewer.Request) (viewer.Producer, error) {
		return &dispatchProducer{d: d, grant: d.Grant(dispatch.KindHuman, r.Owner)}, nil
	}
	dv := newDCViewer(t)
	v, w := connectViewerWith(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "vp8"}, dv.setup)
	if !w.Interactive || w.ProducerID == "" {
		t.Fatalf("welcome %+v", w)
	}
	dv.waitOpen(t)
	g := grantOf(w)

	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, nil))
	if a := dv.expectAck(t, "", action.StatusAccepted, ""); a["retryAfterMs"] != nil {
		t.Fatalf("accepted ack carries retryAfterMs: %v", a)
	}
	dv.expectAck(t, "", action.StatusCompleted, "")

	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, nil))
	a := dv.expectAck(t, "", action.StatusRejected, errcode.RateLimited)
	ms, ok := a["retryAfterMs"].(float64)
	if !ok || ms <= 0 || ms > 4000 {
		t.Fatalf("rate_limited ack %v: want retryAfterMs in (0, 4000]", a)
	}
	t.Logf("rate_limited ack: %v", a)

	v.send(map[string]string{"type": "bye"})
	v.waitClosed(5 * time.Second)
	waitFor(t, 5*time.Second, "release", func() bool { return e.media.releases.Load() == 1 })
}
