package metrics

import (
	"testing"
	"time"
)

func TestWindowPercentilesAndBound(t *testing.T) {
	w := NewWindow(100)
	if s := w.Summary(); s.Count != 0 || s.P50ms != 0 {
		t.Fatalf("empty window: %+v", s)
	}
	// 1..200 ms: only the last 100 (101..200) are held.
	for i := 1; i <= 200; i++ {
		w.Add(time.Duration(i) * time.Millisecond)
	}
	s := w.Summary()
	if s.Count != 200 {
		t.Fatalf("count = %d, want 200", s.Count)
	}
	if s.P50ms != 150 || s.P95ms != 195 || s.Maxms != 200 {
		t.Fatalf("summary = %+v, want p50 150, p95 195, max 200", s)
	}
}
