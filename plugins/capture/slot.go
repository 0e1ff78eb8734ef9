package capture

import "sync"

// Slot is the slot of one between a capture plugin's producer (the
// browser's event loop) and the one goroutine that sends frames to the
// host: a newer frame replaces an unsent one, so a slow host makes frames
// drop, never queue. Seq numbers every offered frame, so a gap in the Seq
// the host sees is exactly the frames counted in Dropped.
type Slot struct {
	ready chan struct{} // cap 1: a frame was put in the slot

	mu      sync.Mutex
	frame   *Frame
	seq     uint64
	dropped uint64
}

// NewSlot returns an empty slot.
func NewSlot() *Slot { return &Slot{ready: make(chan struct{}, 1)} }

// Offer numbers f (its Seq) and puts it in the slot, replacing an unsent
// frame. admit, when not nil, decides first (under the slot's lock, told
// whether an unsent frame waits): encoded video cannot lose a frame and
// stay decodable, so its producer keeps the waiting frame and refuses a
// delta behind it. A refused frame and a replaced one count as dropped.
// Offer reports whether f went in.
func (s *Slot) Offer(f Frame, admit func(waiting bool) bool) bool {
	s.mu.Lock()
	s.seq++
	f.Seq = s.seq
	if admit != nil && !admit(s.frame != nil) {
		s.dropped++
		s.mu.Unlock()
		return false
	}
	if s.frame != nil {
		s.dropped++
	}
	s.frame = &f
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return true
}

// Take empties the slot: the waiting frame with Dropped set to the frames
// dropped so far, or false when none waits.
func (s *Slot) Take() (Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frame == nil {
		return Frame{}, false
	}
	f := *s.frame
	s.frame = nil
	f.Dropped = s.dropped
	return f, true
}

// Counts are the frames offered and dropped so far (for logs).
func (s *Slot) Counts() (seq, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq, s.dropped
}

// Send is the sending goroutine's loop and the only caller of send: it
// sends each frame put in the slot until quit is closed (nil) or send
// fails (its error).
func (s *Slot) Send(quit <-chan struct{}, send func(Frame) error) error {
	for {
		select {
		case <-quit:
			return nil
		case <-s.ready:
		}
		f, ok := s.Take()
		if !ok {
			continue
		}
		if err := send(f); err != nil {
			return err
		}
	}
}
