package dispatch

import (
	"time"

	"github.com/tabcast/tabcast/core/action"
)

// producer is one granted producer id across its generations.
type producer struct {
	id, kind, owner string
	ended           bool
	gen             *generation // current generation
	queue           []*item     // FIFO of not-yet-started actions (current generation)

	// Token bucket; kept across generations so a reconnect does not refill it.
	tokens   float64
	refilled time.Time
}

func (p *producer) grant() Grant {
	return Grant{ID: p.id, Generation: p.gen.n, Kind: p.kind, Owner: p.owner}
}

// take spends one credit if there is one.
func (p *producer) take(now time.Time, burst int, rate float64) bool {
	if el := now.Sub(p.refilled).Seconds(); el > 0 {
		p.tokens = min(float64(burst), p.tokens+el*rate)
		p.refilled = now
	}
	if p.tokens < 1 {
		return false
	}
	p.tokens--
	return true
}

// due is how long until the next credit (after a take that failed, which
// brought the bucket up to date).
func (p *producer) due(rate float64) time.Duration {
	if p.tokens >= 1 || rate <= 0 {
		return 0
	}
	return time.Duration((1 - p.tokens) / rate * float64(time.Second))
}

// generation is the state of one (producerId, producerGeneration): its two
// sequence spaces, its actionId ledger and the input it holds.
type generation struct {
	n           uint64
	ended       bool
	lastControl uint64 // last accepted controlSeq
	pointerHW   uint64 // pointerSeq high-water mark
	ledger      ledger
	held        held
	lastSeen    time.Time // last authenticated Submit; drives the watchdog
}

func newGeneration(n uint64, now time.Time) *generation {
	return &generation{n: n, lastSeen: now, ledger: ledger{m: make(map[string]*entry)}}
}

// item is one accepted, not yet finished action.
type item struct {
	p       *producer
	gen     *generation
	env     action.Envelope
	rev     uint64
	size    int
	reply   func(action.Ack)
	control bool
	at      time.Time // accepted into the queue
	// acceptPending is set until Submit has sent the accepted ack; a final
	// ack ready before that is parked in deferred and sent by Submit, so it
	// never overtakes the accepted ack and nobody waits for anybody.
	acceptPending bool
	deferred      *action.Ack
	// liftedOn is the revision of the page LiftHeld lifted this press on
	// while it ran: if it ran there, finish does not note it as held.
	liftedOn uint64
}

// entry is what the ledger remembers of one accepted control action.
type entry struct {
	a     action.Action
	rev   uint64
	final *action.Ack // nil while queued or running
}

// ledger maps actionIds to results, keeping the most recent ones.
type ledger struct {
	m     map[string]*entry
	order []string // oldest first
}

func (l *ledger) get(id string) *entry { return l.m[id] }

func (l *ledger) put(id string, e *entry, size int) {
	l.m[id] = e
	l.order = append(l.order, id)
	for len(l.order) > size {
		delete(l.m, l.order[0])
		l.order[0] = ""
		l.order = l.order[1:]
	}
}

// cloneAck copies a, Result included, so a ledger entry never shares it.
func cloneAck(a action.Ack) action.Ack {
	if a.Result != nil {
		r := *a.Result
		a.Result = &r
	}
	return a
}

// held is the input a producer generation holds pressed. The dispatcher is
// the one owner of held input: the executor keeps none, and is told with
// each pointer action which buttons are down (action.Action.Buttons); the
// panel keeps only what it pressed, to send its releases and heartbeats.
type held struct {
	keys    []heldKey // press order
	buttons []string  // press order
	x, y    float64   // last pointer position
}

type heldKey struct {
	id, key, code string
	modifiers     int
}

// keyID is how held keys are keyed: by code, else by key.
func keyID(a action.Action) string {
	if a.Code != "" {
		return a.Code
	}
	return a.Key
}

func (h *held) empty() bool { return len(h.keys) == 0 && len(h.buttons) == 0 }

func (h *held) count() int { return len(h.keys) + len(h.buttons) }

func (h *held) hasKey(id string) bool {
	for _, k := range h.keys {
		if k.id == id {
			return true
		}
	}
	return false
}

// note updates the held set after an action ran. mayHave reports whether
// the action may have taken effect (completed or outcome unknown); surely
// whether it did (completed). A down counts when it may have happened, an
// up only when it surely did: a spurious release is harmless, a stuck key
// is not.
func (h *held) note(a action.Action, mayHave, surely bool) {
	if !mayHave {
		return
	}
	if a.UsesCoordinates() {
		h.x, h.y = a.X, a.Y
	}
	switch a.Kind {
	case action.KeyDown:
		if id := keyID(a); !h.hasKey(id) {
			h.keys = append(h.keys, heldKey{id: id, key: a.Key, code: a.Code, modifiers: a.Modifiers})
		}
	case action.KeyUp:
		if surely {
			id := keyID(a)
			for i, k := range h.keys {
				if k.id == id {
					h.keys = append(h.keys[:i], h.keys[i+1:]...)
					break
				}
			}
		}
	case action.PointerDown:
		if !h.holdsButton(a.Button) {
			h.buttons = append(h.buttons, a.Button)
		}
	case action.PointerUp:
		if surely {
			for i, b := range h.buttons {
				if b == a.Button {
					h.buttons = append(h.buttons[:i], h.buttons[i+1:]...)
					break
				}
			}
		}
	}
}

// holdsButton reports whether the generation holds button pressed.
func (h *held) holdsButton(name string) bool {
	for _, b := range h.buttons {
		if b == name {
			return true
		}
	}
	return false
}

// mask is the held buttons as action.Action.Buttons bits.
func (h *held) mask() int {
	m := 0
	for _, b := range h.buttons {
		m |= action.ButtonBit(b)
	}
	return m
}

// releases returns the actions that lift everything held — buttons at the
// last position, then keys, each in reverse press order — and clears the
// set. Each pointer_up carries the buttons held as it starts: others (what
// other producers hold) and what this one still holds.
func (h *held) releases(others int) []action.Action {
	var out []action.Action
	buttons := others | h.mask()
	for i := len(h.buttons) - 1; i >= 0; i-- {
		out = append(out, action.Action{Kind: action.PointerUp, X: h.x, Y: h.y, Button: h.buttons[i], Buttons: buttons})
		buttons &^= action.ButtonBit(h.buttons[i])
	}
	for i := len(h.keys) - 1; i >= 0; i-- {
		k := h.keys[i]
		out = append(out, action.Action{Kind: action.KeyUp, Key: k.key, Code: k.code, Modifiers: k.modifiers})
	}
	h.keys, h.buttons = nil, nil
	return out
}

// Release is an action that lifts held input, and the producer whose
// input it lifts.
type Release struct {
	ProducerID string
	Action     action.Action
}

// buttonsLocked is the mouse buttons held on the page, the union over the
// producers (the page has one mouse), leaving out generation except.
func (d *Dispatcher) buttonsLocked(except *generation) int {
	m := 0
	for _, p := range d.ring {
		if p.gen != nil && p.gen != except {
			m |= p.gen.held.mask()
		}
	}
	return m
}

// LiftHeld forgets what every producer holds, and the releases not run
// yet, and returns the actions that lift all of it, for the caller to run
// on the page being left (a tab switch): nothing stays pressed on a page
// nobody drives, and nothing is lifted again on the next page. The
// caller must hold the page's turn, so that no action is running.
//
// A press may be running: waiting for the turn, or run and not noted yet
// (its Execute returned and handed the turn over, finish has not run).
// Its release is included either way — a spurious release is harmless, a
// stuck button is not — and finish does not note it as held if it ran on
// the page left.
func (d *Dispatcher) LiftHeld() []Release {
	left := d.ex.PageRevision()
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Release
	for _, r := range d.sys {
		out = append(out, Release{ProducerID: r.producerID, Action: r.a})
	}
	d.sys = nil
	if it := d.pressing; it != nil && it.liftedOn == 0 {
		it.liftedOn = left
		a := it.env.Action
		switch a.Kind {
		case action.PointerDown:
			out = append(out, Release{ProducerID: it.p.id, Action: action.Action{Kind: action.PointerUp, X: a.X, Y: a.Y, Button: a.Button,
				Buttons: d.buttonsLocked(nil) | action.ButtonBit(a.Button)}})
		case action.KeyDown:
			out = append(out, Release{ProducerID: it.p.id, Action: action.Action{Kind: action.KeyUp, Key: a.Key, Code: a.Code}})
		}
	}
	for _, p := range d.ring {
		if p.gen == nil || p.gen.held.empty() {
			continue
		}
		for _, a := range p.gen.held.releases(d.buttonsLocked(p.gen)) {
			out = append(out, Release{ProducerID: p.id, Action: a})
		}
		d.st.releaseEvents++
	}
	return out
}
