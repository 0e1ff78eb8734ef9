package session

import (
	"testing"

	"github.com/tabcast/tabcast/plugins/capture"
)

// TestPipelineTotals: a session's per-codec counters keep what its
// stopped pipelines counted.
func TestPipelineTotals(t *testing.T) {
	m := &Manager{sessions: map[string]*Session{}, order: []string{"s1"}}
	m.vid.Store(&Video{BitrateKbps: 1000})
	s := &Session{id: "s1", m: m, pipes: map[string]*codecPipe{}}
	m.sessions["s1"] = s
	total := func() uint64 {
		t.Helper()
		list := m.PipelineTotals()["s1"]
		if len(list) != 1 || list[0].Codec != "vp8" {
			t.Fatalf("totals %+v", list)
		}
		return list[0].FramesEncoded
	}
	// Frames the pipeline writes (passed through: no encoder needed).
	sendN := func(p *codecPipe, n int) {
		for range n {
			p.Pass(capture.Frame{Format: capture.FormatVP8, Data: []byte{1, 2, 3}, Keyframe: true})
		}
	}
	p, err := s.newPipe("vp8")
	if err != nil {
		t.Fatal(err)
	}
	sendN(p, 10)
	s.pipes["vp8"] = p
	if got := total(); got != 10 {
		t.Fatalf("running pipeline: %d frames, want 10", got)
	}
	// The last viewer leaves (release), a new one comes later.
	s.mu.Lock()
	delete(s.pipes, "vp8")
	s.retireLocked(p)
	s.mu.Unlock()
	if got := total(); got != 10 {
		t.Fatalf("after the pipeline stopped: %d frames, want 10", got)
	}
	p2, _ := s.newPipe("vp8")
	sendN(p2, 3)
	s.pipes["vp8"] = p2
	if got := total(); got != 13 {
		t.Fatalf("with a new pipeline: %d frames, want 13", got)
	}
}
