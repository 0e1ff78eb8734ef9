package session

import (
	"fmt"
	"sync"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/input"
)

// PageStatePayload is the page_state event's body.
type PageStatePayload struct {
	URL          string `json:"url"`
	Title        string `json:"title"`
	CanGoBack    bool   `json:"canGoBack"`
	CanGoForward bool   `json:"canGoForward"`
	Loading      bool   `json:"loading"`
	PageRevision uint64 `json:"pageRevision"`
}

// DialogPayload is the dialog_opened event's body (the page's own text: it
// goes to the session's viewers, never to logs).
type DialogPayload struct {
	Type          string `json:"dialogType"`
	Message       string `json:"message"`
	DefaultPrompt string `json:"defaultPrompt,omitempty"`
}

// stateHub fans page events out to the interactive viewers and remembers
// the latest page state and open dialog for viewers who join later.
type stateHub struct {
	mu     sync.Mutex
	subs   map[uint64]func(action.StateEvent)
	next   uint64
	page   *action.StateEvent
	dialog *action.StateEvent
}

func (h *stateHub) subscribe(fn func(action.StateEvent)) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[uint64]func(action.StateEvent){}
	}
	h.next++
	h.subs[h.next] = fn
	// Subscribers never block (their sinks coalesce), so calling under the
	// lock keeps the order: current state first, then every later event.
	if h.page != nil {
		fn(*h.page)
	}
	if h.dialog != nil {
		fn(*h.dialog)
	}
	return h.next
}

func (h *stateHub) unsubscribe(id uint64) {
	h.mu.Lock()
	delete(h.subs, id)
	h.mu.Unlock()
}

func (h *stateHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *stateHub) publish(ev action.StateEvent, remember func(*action.StateEvent)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	remember(&ev)
	for _, fn := range h.subs {
		fn(ev)
	}
}

func (s *Session) onPageState(ps input.PageState) {
	s.mu.Lock()
	s.url, s.title = ps.URL, ps.Title
	s.mu.Unlock()
	s.hub.publish(action.StateEvent{Type: "page_state", Payload: PageStatePayload{
		URL: ps.URL, Title: ps.Title, CanGoBack: ps.CanGoBack, CanGoForward: ps.CanGoForward,
		Loading: ps.Loading, PageRevision: ps.PageRevision,
	}}, func(ev *action.StateEvent) { s.hub.page = ev })
}

func (s *Session) onDialogOpened(d input.Dialog) {
	s.hub.publish(action.StateEvent{Type: "dialog_opened", Payload: DialogPayload{Type: d.Type, Message: d.Message, DefaultPrompt: d.DefaultPrompt}},
		func(ev *action.StateEvent) { s.hub.dialog = ev })
}

func (s *Session) onDialogClosed() {
	s.hub.publish(action.StateEvent{Type: "dialog_closed", Payload: struct{}{}}, func(*action.StateEvent) { s.hub.dialog = nil })
}

// Producer is one interactive viewer's (or agent's) right to act on the
// session, fenced by the dispatcher.
type Producer struct {
	s     *Session
	kind  string
	owner string
	grant dispatch.Grant
	sub   uint64
	once  sync.Once
}

// OpenProducer grants a new producer and subscribes onState to page events
// (the current state is delivered at once). onState must not block.
func (s *Session) OpenProducer(kind, owner string, onState func(action.StateEvent)) (*Producer, error) {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st != StateReady {
		return nil, fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	p := &Producer{s: s, grant: s.disp.Grant(kind, owner), kind: kind, owner: owner}
	if onState != nil {
		p.sub = s.hub.subscribe(onState)
	}
	if kind == dispatch.KindHuman {
		s.ho.panelOpened(owner)
	}
	return p, nil
}

// Grant is the grant's id and generation, which a viewer's envelopes
// must carry (viewer.Producer).
func (p *Producer) Grant() (id string, generation uint64) { return p.grant.ID, p.grant.Generation }

// PageRevision is the page's current revision.
func (p *Producer) PageRevision() uint64 { return p.s.ex.PageRevision() }

// Submit hands one envelope to the dispatcher. The producer fields are
// stamped from the grant: a client never chooses them.
func (p *Producer) Submit(e action.Envelope, reply func(action.Ack)) {
	e.ProducerID, e.ProducerGeneration = p.grant.ID, p.grant.Generation
	if e.Action.Kind != action.Heartbeat {
		p.s.noteInput()
	}
	p.s.disp.Submit(e, reply)
}

// Close ends the producer: its held keys and buttons are released and its
// queued actions dropped. Idempotent.
func (p *Producer) Close() {
	p.once.Do(func() {
		p.s.disp.End(p.grant.ID)
		if p.sub != 0 {
			p.s.hub.unsubscribe(p.sub)
		}
		if p.kind == dispatch.KindHuman {
			p.s.ho.panelClosed(p.owner)
		}
	})
}
