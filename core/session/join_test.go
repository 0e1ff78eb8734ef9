package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/viewer"
)

// TestSubscriptionTransport: a viewer's transport goes to the panel's table
// and, in bit/s, to its codec's pipeline; Leave withdraws both and releases
// the track once, and a report racing Leave is dropped.
func TestSubscriptionTransport(t *testing.T) {
	m := &Manager{}
	m.vid.Store(&Video{BitrateKbps: 2500})
	s := &Session{m: m, id: "t"}
	p, err := s.newPipe("vp8") // never started: only its rate is looked at
	if err != nil {
		t.Fatal(err)
	}
	s.pipes = map[string]*codecPipe{"vp8": p}
	target := func() int { return p.Stats(0).TargetKbps }
	releases := 0
	sub := &Subscription{s: s, codec: "vp8", owner: "ann", release: func() { releases++ }}

	sub.ReportTransport(viewer.Transport{Peer: "p1", Path: "host", Protocol: "udp", RTT: 12 * time.Millisecond,
		FractionLost: 0.01, EstimateBps: 900_000, SteadyBps: 800_000})
	if got := target(); got != 900 {
		t.Errorf("pipeline target %d kbit/s, want 900", got)
	}
	info := s.viewerInfo["p1"]
	if info.User != "ann" || info.Codec != "vp8" || info.Interactive || info.EstimateKbps != 900 || info.SteadyKbps != 800 ||
		info.RTTMs != 12 || info.LossPct != 1 || info.Path != "host" {
		t.Errorf("panel row %+v", info)
	}

	sub.Leave()
	sub.Leave()
	sub.ReportTransport(viewer.Transport{Peer: "p1", EstimateBps: 500_000})
	if releases != 1 {
		t.Errorf("track released %d times, want 1", releases)
	}
	if len(s.viewerInfo) != 0 || target() != 2500 {
		t.Errorf("after Leave: %d rows, target %d", len(s.viewerInfo), target())
	}
	if sub.Producer() != nil {
		t.Error("a view-only subscription has an input")
	}
}

// TestJoinRefusals: an unknown or closed session refuses a viewer with
// viewer.ErrSessionNotFound, which signaling answers session_not_found.
func TestJoinRefusals(t *testing.T) {
	m, _ := newManager(t, Config{})
	if _, err := m.Codecs("nope"); !errors.Is(err, viewer.ErrSessionNotFound) {
		t.Fatalf("Codecs of an unknown session: %v", err)
	}
	if _, err := m.Join("nope", viewer.Request{Codec: "vp8"}); !errors.Is(err, viewer.ErrSessionNotFound) {
		t.Fatalf("Join of an unknown session: %v", err)
	}
	s := create(t, m)
	if codecs, err := m.Codecs(s.ID()); err != nil || len(codecs) != 1 || codecs[0] != "vp8" {
		t.Fatalf("Codecs: %v %v", codecs, err)
	}
	if err := m.Close(context.Background(), s.ID()); err != nil {
		t.Fatal(err)
	}
	sub, err := m.Join(s.ID(), viewer.Request{Codec: "vp8", Owner: "ann", Interactive: true})
	if !errors.Is(err, viewer.ErrSessionNotFound) || sub != nil {
		t.Fatalf("Join of a closed session: %v %v", sub, err)
	}
}
