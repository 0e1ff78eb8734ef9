package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/tabcast/tabcast/core/action"
)

// Control policies of a session.
const (
	// ControlShared: people and agents act concurrently through the fair
	// dispatcher (the default).
	ControlShared = "shared"
	// ControlExclusive: a person may take control; agents are then refused
	// (human_in_control) until they release it or their lease lapses.
	ControlExclusive = "exclusive"
)

// leaseGrace keeps a person's control across a panel reconnect.
const leaseGrace = 30 * time.Second

// ErrHumanInControl refuses an agent while a person holds control.
var ErrHumanInControl = errors.New("session: a person holds control")

// HumanRequest is an agent asking for a person (a login, a captcha, a
// confirmation before submitting).
type HumanRequest struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
	By     string    `json:"by"` // the agent's user
	Since  time.Time `json:"since"`
	done   chan string
}

// HumanOutcome is how a request for a person ended.
type HumanOutcome struct {
	Done   bool          `json:"done"`
	By     string        `json:"by,omitempty"` // who marked it done
	Waited time.Duration `json:"waitedMs"`
}

// Control is who may act, as the snapshot shows it.
type Control struct {
	Policy string `json:"policy"`
	// Holder is the person holding control (exclusive policy only).
	Holder string `json:"holder,omitempty"`
}

// handoff is the session's hand-off state (own lock: agents poll it).
type handoff struct {
	mu       sync.Mutex
	policy   string
	holder   string
	lastSeen time.Time      // holder's last panel connection end
	panels   map[string]int // open human producers per user
	requests map[string]*HumanRequest
}

const maxHumanRequests = 16

func (h *handoff) init(policy string) {
	if policy == "" {
		policy = ControlShared
	}
	h.policy, h.panels, h.requests = policy, map[string]int{}, map[string]*HumanRequest{}
}

// panelOpened / panelClosed track a person's producers, which keep their
// control lease alive.
func (h *handoff) panelOpened(user string) {
	h.mu.Lock()
	h.panels[user]++
	h.mu.Unlock()
}

func (h *handoff) panelClosed(user string) {
	h.mu.Lock()
	if h.panels[user]--; h.panels[user] <= 0 {
		delete(h.panels, user)
		if user == h.holder {
			h.lastSeen = time.Now()
		}
	}
	h.mu.Unlock()
}

// holderLocked returns the live holder, dropping a lapsed lease.
func (h *handoff) holderLocked(now time.Time) string {
	if h.holder == "" {
		return ""
	}
	if h.panels[h.holder] == 0 && !h.lastSeen.IsZero() && now.Sub(h.lastSeen) > leaseGrace {
		h.holder = ""
	}
	return h.holder
}

// Control reports the policy and the current holder.
func (s *Session) Control() Control {
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	return Control{Policy: s.ho.policy, Holder: s.ho.holderLocked(time.Now())}
}

// TakeControl gives user exclusive control (exclusive policy only).
func (s *Session) TakeControl(user string) error {
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	if s.ho.policy != ControlExclusive {
		return errors.New("session: the control policy is shared; nothing to take")
	}
	if cur := s.ho.holderLocked(time.Now()); cur != "" && cur != user {
		return ErrHumanInControl
	}
	s.ho.holder, s.ho.lastSeen = user, time.Now()
	return nil
}

// ReleaseControl gives control back (by its holder, or anyone when
// force, e.g. an admin).
func (s *Session) ReleaseControl(user string, force bool) {
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	if s.ho.holder == user || force {
		s.ho.holder = ""
	}
}

// AgentMayAct returns ErrHumanInControl while a person holds control.
func (s *Session) AgentMayAct() error {
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	if s.ho.holderLocked(time.Now()) != "" {
		return ErrHumanInControl
	}
	return nil
}

// RequestHuman shows reason to the session's people and waits until one of
// them marks it done, ctx ends, or the session ends.
func (s *Session) RequestHuman(ctx context.Context, by, reason string) (HumanOutcome, error) {
	start := time.Now()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r := &HumanRequest{ID: hex.EncodeToString(b), Reason: reason, By: by, Since: start.UTC(), done: make(chan string, 1)}
	s.ho.mu.Lock()
	if len(s.ho.requests) >= maxHumanRequests {
		s.ho.mu.Unlock()
		return HumanOutcome{}, errors.New("session: too many open requests for a person")
	}
	s.ho.requests[r.ID] = r
	s.ho.mu.Unlock()
	s.hub.publish(action.StateEvent{Type: "human_requested", Payload: r}, func(*action.StateEvent) {})
	defer func() {
		s.ho.mu.Lock()
		delete(s.ho.requests, r.ID)
		s.ho.mu.Unlock()
		s.hub.publish(action.StateEvent{Type: "human_request_closed", Payload: map[string]string{"id": r.ID}}, func(*action.StateEvent) {})
	}()
	select {
	case who := <-r.done:
		return HumanOutcome{Done: true, By: who, Waited: time.Since(start)}, nil
	case <-ctx.Done():
		return HumanOutcome{Waited: time.Since(start)}, nil
	case <-s.done:
		return HumanOutcome{Waited: time.Since(start)}, ErrNotReady
	}
}

// HumanDone marks a request done; false when there is no such request.
func (s *Session) HumanDone(id, user string) bool {
	s.ho.mu.Lock()
	r := s.ho.requests[id]
	s.ho.mu.Unlock()
	if r == nil {
		return false
	}
	select {
	case r.done <- user:
	default:
	}
	return true
}

// HumanRequests lists the open requests, oldest first.
func (s *Session) HumanRequests() []HumanRequest {
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	out := make([]HumanRequest, 0, len(s.ho.requests))
	for _, r := range s.ho.requests {
		out = append(out, HumanRequest{ID: r.ID, Reason: r.Reason, By: r.By, Since: r.Since})
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Since.Before(out[j-1].Since); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
