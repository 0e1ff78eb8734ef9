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
	s := &Session{m: m}
	p := &pipeline{codec: "vp8", s: s, rates: map[string]viewerRate{}}
	p.targetKbps.Store(2500)
	s.pipes = map[string]*pipeline{"vp8": p}
	releases := 0
	sub := &Subscription{s: s, codec: "vp8", owner: "ann", release: func() { releases++ }}

	sub.ReportTransport(viewer.Transport{Peer: "p1", Path: "host", Protocol: "udp", RTT: 12 * time.Millisecond,
		FractionLost: 0.01, EstimateBps: 900_000, SteadyBps: 800_000})
	if got, steady := p.targetKbps.Load(), p.steadyKbps.Load(); got != 900 || steady != 800 {
		t.Errorf("pipeline target %d steady %d, want 900 and 800", got, steady)
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
	if len(s.viewerInfo) != 0 || p.targetKbps.Load() != 2500 {
		t.Errorf("after Leave: %d rows, target %d", len(s.viewerInfo), p.targetKbps.Load())
	}
	if sub.Input() != nil {
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
