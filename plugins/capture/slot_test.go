package capture

import (
	"errors"
	"testing"
)

func TestSlotKeepsTheNewestAndCounts(t *testing.T) {
	s := NewSlot()
	if _, ok := s.Take(); ok {
		t.Fatal("an empty slot gave a frame")
	}
	for i := range 3 {
		if !s.Offer(Frame{Data: []byte{byte(i)}}, nil) {
			t.Fatalf("frame %d refused without admit", i)
		}
	}
	f, ok := s.Take()
	if !ok || f.Data[0] != 2 || f.Seq != 3 || f.Dropped != 2 {
		t.Fatalf("Take = %+v %v, want the third frame, seq 3, 2 dropped", f, ok)
	}
	// admit sees the waiting frame; a refused frame is counted too.
	s.Offer(Frame{Keyframe: true}, nil)
	var sawWaiting bool
	if s.Offer(Frame{}, func(waiting bool) bool { sawWaiting = waiting; return false }) || !sawWaiting {
		t.Fatalf("a refused frame went in (admit saw waiting %v)", sawWaiting)
	}
	if f, _ := s.Take(); !f.Keyframe || f.Seq != 4 || f.Dropped != 3 {
		t.Fatalf("Take = %+v, want the kept keyframe, seq 4, 3 dropped", f)
	}
	if seq, dropped := s.Counts(); seq != 5 || dropped != 3 {
		t.Fatalf("Counts = %d, %d", seq, dropped)
	}
}

func TestSlotSend(t *testing.T) {
	s := NewSlot()
	quit := make(chan struct{})
	boom := errors.New("host gone")
	got := make(chan uint64, 4)
	done := make(chan error, 1)
	go func() {
		done <- s.Send(quit, func(f Frame) error {
			got <- f.Seq
			if f.Seq == 2 {
				return boom
			}
			return nil
		})
	}()
	s.Offer(Frame{}, nil)
	if seq := <-got; seq != 1 {
		t.Fatalf("sent seq %d", seq)
	}
	s.Offer(Frame{}, nil)
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("Send = %v, want send's error", err)
	}
	go func() { done <- s.Send(quit, func(Frame) error { return nil }) }()
	close(quit)
	if err := <-done; err != nil {
		t.Fatalf("Send after quit = %v", err)
	}
}
