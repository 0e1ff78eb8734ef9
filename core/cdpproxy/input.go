package cdpproxy

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// Input fencing. The client's input enters the session's one dispatcher
// as an agent producer "cdp:<name>", one action per CDP input command, in
// the client's order (one input worker per connection), each with an
// actionRevision and charged like the agent API's actions. While a person
// holds exclusive control a command waits, up to Limits.InputDeadline,
// then fails human_in_control. The producer ends with the connection: the
// dispatcher releases whatever the client held (the page sees mouseup).
//
// Touch, IME composition and drag events have no dispatcher kind: they
// wait for control like the rest and then go to the page directly.

// inputState is the input worker's (only it touches it).
type inputState struct {
	prod       Producer
	controlSeq uint64
	pointerSeq uint64
	nextID     uint64
	// heldOffAt is when an input command last failed human_in_control.
	// A command that arrived before it was part of the same gesture as
	// far as the client knew (Playwright sends a click's move, press and
	// release at once): it fails too, or a press and release whose move
	// failed would land when the person lets go, a click the client was
	// told did not happen.
	heldOffAt time.Time
}

// actionWait bounds one action from acceptance to its final ack (the
// dispatcher's own deadline is 30 s).
const actionWait = 35 * time.Second

// input runs one input command, which arrived from the client at
// arrived, on the input worker.
func (p *proxy) input(m *message, r rule, arrived time.Time) {
	err := p.inputErr(m, r, arrived)
	if m.Method != "Input.dispatchMouseEvent" || !isMove(m.Params) {
		p.sv.audit(p, "cdp."+m.Method, outcomeOf(err), codeOf(err))
	}
	if err != nil {
		p.answer(m, nil, fromErr(m.Method, err))
		return
	}
	if r == ruleFenced {
		return // forwarded: Chromium's answer goes to the client
	}
	p.answer(m, nil, nil)
}

func isMove(params json.RawMessage) bool {
	var a struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(params, &a)
	return a.Type == "mouseMoved"
}

func (p *proxy) inputErr(m *message, r rule, arrived time.Time) error {
	if arrived.Before(p.in.heldOffAt) {
		return errcode.New(errcode.HumanInControl, "an input command sent before this one failed: a person held control")
	}
	tab, err := p.streamTab(m)
	if err != nil {
		return err
	}
	if err := p.waitControl(); err != nil {
		if errcode.CodeOf(err) == errcode.HumanInControl {
			p.in.heldOffAt = time.Now()
		}
		return err
	}
	if r == ruleFenced || tab == "" {
		// A frame's or worker's session, or a kind the dispatcher has
		// no action for: straight to the page, after the wait.
		p.forward(m, m.Params)
		return nil
	}
	acts, err := p.actions(m)
	if err != nil {
		return err
	}
	for _, a := range acts {
		if err := p.submit(a); err != nil {
			return err
		}
	}
	return nil
}

// streamTab makes the command's tab the streamed one (input always goes to
// what the people see) and returns it; "" when the session is not a tab's.
func (p *proxy) streamTab(m *message) (string, error) {
	c := p.childOf(m.SessionID)
	if c == nil || c.typ != "page" {
		return "", nil
	}
	for _, t := range p.s.Tabs() {
		if t.ID != c.targetID {
			continue
		}
		if !t.Current {
			ctx, cancel := context.WithTimeout(p.ctx, createTargetWait)
			defer cancel()
			if err := p.s.SwitchTab(ctx, t.ID); err != nil {
				return "", err
			}
		}
		return t.ID, nil
	}
	return "", nil
}

// controlPoll is how often a waiting input command looks at control.
const controlPoll = 100 * time.Millisecond

// waitControl waits while a person holds exclusive control.
func (p *proxy) waitControl() error {
	deadline := time.Now().Add(time.Duration(p.lim.InputDeadline) * time.Second)
	for {
		err := p.s.AgentMayAct()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return errcode.Newf(errcode.HumanInControl, "a person held control for %d s", p.lim.InputDeadline)
		}
		select {
		case <-p.ctx.Done():
			return errcode.New(errcode.SessionClosed, "the connection ended")
		case <-time.After(controlPoll):
		}
	}
}

// actions maps one CDP input command to dispatcher actions.
func (p *proxy) actions(m *message) ([]action.Action, error) {
	bad := func(why string) error { return errcode.New(errcode.InvalidArgument, why) }
	switch m.Method {
	case "Input.insertText":
		var a struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(orEmpty(m.Params), &a) != nil {
			return nil, bad("text must be a string")
		}
		if a.Text == "" {
			return nil, nil
		}
		return []action.Action{{Kind: action.TextInsert, Text: a.Text}}, nil
	case "Input.dispatchKeyEvent":
		var a struct {
			Type       string `json:"type"`
			Key        string `json:"key"`
			Code       string `json:"code"`
			Text       string `json:"text"`
			Modifiers  int    `json:"modifiers"`
			AutoRepeat bool   `json:"autoRepeat"`
		}
		if json.Unmarshal(orEmpty(m.Params), &a) != nil {
			return nil, bad("type, key, code and text must be strings, modifiers a number")
		}
		mods := a.Modifiers & 0xf
		switch a.Type {
		case "keyDown", "rawKeyDown":
			if a.Key == "" && a.Code == "" {
				if a.Text == "" {
					return nil, nil
				}
				return []action.Action{{Kind: action.TextInsert, Text: a.Text}}, nil
			}
			return []action.Action{{Kind: action.KeyDown, Key: a.Key, Code: a.Code, Modifiers: mods, Repeat: a.AutoRepeat}}, nil
		case "keyUp":
			if a.Key == "" && a.Code == "" {
				return nil, nil
			}
			return []action.Action{{Kind: action.KeyUp, Key: a.Key, Code: a.Code, Modifiers: mods}}, nil
		case "char":
			if a.Text == "" {
				return nil, nil
			}
			return []action.Action{{Kind: action.TextInsert, Text: a.Text}}, nil
		}
		return nil, bad("type must be keyDown, rawKeyDown, keyUp or char")
	case "Input.dispatchMouseEvent":
		var a struct {
			Type       string  `json:"type"`
			X          float64 `json:"x"`
			Y          float64 `json:"y"`
			Button     string  `json:"button"`
			ClickCount int     `json:"clickCount"`
			Modifiers  int     `json:"modifiers"`
			DeltaX     float64 `json:"deltaX"`
			DeltaY     float64 `json:"deltaY"`
		}
		if json.Unmarshal(orEmpty(m.Params), &a) != nil {
			return nil, bad("type and button must be strings, x, y and deltas numbers")
		}
		w, h := p.s.InputViewport()
		if w <= 0 || h <= 0 {
			return nil, errcode.New(errcode.NotReady, "the session has no viewport yet")
		}
		norm := func(v float64, size int) float64 {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0
			}
			return math.Min(math.Max(v/float64(size), 0), 1)
		}
		act := action.Action{X: norm(a.X, w), Y: norm(a.Y, h), Modifiers: a.Modifiers & 0xf, ClickCount: min(max(a.ClickCount, 0), 3)}
		switch a.Type {
		case "mouseMoved":
			act.Kind = action.PointerMove
		case "mouseWheel":
			act.Kind, act.DeltaX, act.DeltaY = action.Wheel, a.DeltaX, a.DeltaY
		case "mousePressed", "mouseReleased":
			act.Kind = action.PointerDown
			if a.Type == "mouseReleased" {
				act.Kind = action.PointerUp
			}
			switch a.Button {
			case "left", "middle", "right":
				act.Button = a.Button
			default:
				return nil, bad("button must be left, middle or right")
			}
		default:
			return nil, bad("type must be mouseMoved, mousePressed, mouseReleased or mouseWheel")
		}
		return []action.Action{act}, nil
	}
	return nil, errcode.New(errcode.NotAllowed, "no dispatcher action for this method")
}

// viewport applies Emulation.setDeviceMetricsOverride: on the streamed
// tab it is the session's viewport (through the dispatcher, bounded like
// the panel's viewport message; viewers see the new size); elsewhere it
// goes to the page as it is.
func (p *proxy) viewport(m *message, params map[string]json.RawMessage) {
	tab, err := p.currentTabOf(m)
	if err == nil && tab == "" {
		p.forward(m, m.Params)
		return
	}
	if err == nil && m.Method == "Emulation.clearDeviceMetricsOverride" {
		// The streamed tab keeps the session's size.
		p.answer(m, nil, nil)
		return
	}
	var w, h int
	if err == nil {
		_ = json.Unmarshal(params["width"], &w)
		_ = json.Unmarshal(params["height"], &h)
		if w == 0 && h == 0 {
			p.answer(m, nil, nil) // "no override": the session's size stays
			return
		}
		err = p.submit(action.Action{Kind: action.Viewport, Width: w, Height: h})
	}
	p.sv.audit(p, "cdp."+m.Method, outcomeOf(err), codeOf(err))
	if err != nil {
		p.answer(m, nil, fromErr(m.Method, err))
		return
	}
	p.answer(m, nil, nil)
}

// currentTabOf is the command's tab when it is the streamed one.
func (p *proxy) currentTabOf(m *message) (string, error) {
	c := p.childOf(m.SessionID)
	if c == nil || c.typ != "page" {
		return "", nil
	}
	for _, t := range p.s.Tabs() {
		if t.ID == c.targetID && t.Current {
			return t.ID, p.waitControl()
		}
	}
	return "", nil
}

// budgetWait is about one credit of the dispatcher's refill (8/s).
const budgetWait = 125 * time.Millisecond

// submit hands one action to the dispatcher and waits for its end (a
// pointer move or wheel only until it is accepted: the dispatcher acks
// those only when it refuses them). A full queue or an empty rate budget
// is waited out, as the agent API does.
func (p *proxy) submit(a action.Action) error {
	in := &p.in
	if in.prod == nil {
		prod, err := p.s.OpenProducer("cdp:" + p.who.Name)
		if err != nil {
			return errcode.Wrap(errcode.NotReady, err, "the session is not ready for input")
		}
		in.prod = prod
	}
	ctx, cancel := context.WithTimeout(p.ctx, actionWait)
	defer cancel()
	for {
		acks, retry, err := p.submitOnce(a)
		var ae *errcode.Error
		if err == nil || !errors.As(err, &ae) || (ae.Code != errcode.RateLimited && ae.Code != errcode.QueueFull) {
			if err != nil || acks == nil {
				return err
			}
			select {
			case k := <-acks:
				if k.Status == action.StatusCompleted {
					return nil
				}
				return errcode.New(k.Code, k.Message)
			case <-ctx.Done():
				return errcode.New(errcode.OutcomeUnknown, "the action did not finish in time; its outcome is unknown")
			}
		}
		wait := budgetWait
		if ae.Code == errcode.RateLimited && retry > 0 {
			wait = min(retry, time.Second)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// submitOnce submits a once; the dispatcher answers accepted or refused
// before Submit returns.
func (p *proxy) submitOnce(a action.Action) (chan action.Ack, time.Duration, error) {
	in := &p.in
	a.PageRevision = in.prod.PageRevision()
	in.nextID++
	env := action.Envelope{ActionID: "cdp-" + strconv.FormatUint(in.nextID, 10), Action: a}
	if a.OnPointerChannel() {
		in.pointerSeq++
		env.PointerSeq = in.pointerSeq
		in.prod.Submit(env, func(action.Ack) {})
		return nil, 0, nil
	}
	env.ControlSeq = in.controlSeq + 1
	acks := make(chan action.Ack, 2)
	var first *action.Ack
	in.prod.Submit(env, func(k action.Ack) {
		if first == nil {
			first = &k // the synchronous ack, on this goroutine
			return
		}
		select {
		case acks <- k:
		default:
		}
	})
	switch {
	case first == nil:
		return nil, 0, errcode.New(errcode.OutcomeUnknown, "the dispatcher did not answer")
	case first.Status == action.StatusAccepted:
		in.controlSeq = env.ControlSeq
		return acks, 0, nil
	}
	return nil, time.Duration(first.RetryAfterMs) * time.Millisecond, errcode.New(first.Code, first.Message)
}

// closeInput ends the producer: the dispatcher lifts what the client held.
func (p *proxy) closeInput() {
	// The input worker has stopped or is stopping (ctx is done); the
	// producer is only read here after it.
	p.wg.Wait()
	if p.in.prod != nil {
		p.in.prod.Close()
	}
}
