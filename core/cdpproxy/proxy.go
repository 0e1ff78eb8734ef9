package cdpproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"

	"github.com/tabcast/tabcast/core/browser"
)

// proxy is one client connection. Its goroutines (all under wg, all ended
// by cancel): the reader (run's own), the writer, the target worker
// (target.go), the input worker (input.go) and one waiter per command in
// flight at Chromium (at most the BrowserConn's bound).
type proxy struct {
	sv        *Server
	sessionID string
	s         Session
	up        *browser.BrowserConn // the client's own connection to Chromium
	bctx      string               // the session's browser context ("" = all)
	c         Conn
	who       Client
	lim       Limits
	log       *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	out    chan []byte // the write queue

	tq chan func() // the target worker's queue (target.go)
	iq chan func() // the input worker's queue (input.go)

	shot chan struct{} // one screenshot at a time: at most one copy held

	mu             sync.Mutex
	children       map[string]*child // attached sessions the client may use, by session id
	targets        map[string]targetInfo
	discover       bool // the client asked for target discovery
	discoverFilter []filterEntry
	auto           *autoAttach // the client's browser-level auto-attach; nil = off
	autoDone       map[string]bool
	redirect       map[string]string // target id → the client's browser session that attaches it
	stops          []func()
	why            string // why the connection ended
	code           int
	downloads      bool // the client changed the download behavior

	in inputState // input.go
}

type child struct {
	targetID string
	typ      string // a target type, or browserSession
}

// browserSession marks a client's extra browser session.
const browserSession = "browser"

func newProxy(sv *Server, sessionID string, s Session, up *browser.BrowserConn, bctx string, c Conn, who Client) *proxy {
	return &proxy{
		sv: sv, sessionID: sessionID, s: s, up: up, bctx: bctx, c: c, who: who, lim: sv.cfg.Limits,
		log:      sv.log.With("client", "cdp:"+who.Name),
		out:      make(chan []byte, sv.cfg.Limits.WriteQueue),
		tq:       make(chan func(), queueLen),
		iq:       make(chan func(), queueLen),
		shot:     make(chan struct{}, 1),
		children: map[string]*child{},
		targets:  map[string]targetInfo{},
		autoDone: map[string]bool{},
		redirect: map[string]string{},
	}
}

// queueLen bounds the target and input workers' queues; the reader waits
// when one is full (the client's own commands back up, nothing grows).
const queueLen = 64

// writeTimeout ends a client that does not take one message in this long.
const writeTimeout = 10 * time.Second

func (p *proxy) run(parent context.Context) error {
	p.ctx, p.cancel = context.WithCancel(parent)
	defer p.shutdown()
	// Our own discovery: the scope's targets, to filter by and to
	// auto-attach for the client. On this connection only.
	stop := p.up.Listen("", p.onBrowserEvent, func() { p.end(closeGoingAway, "the browser connection closed") })
	p.addStop(stop)
	if err := p.up.Call(p.ctx, "Target.setDiscoverTargets", map[string]any{"discover": true, "filter": []filterEntry{{}}}, nil); err != nil {
		p.end(closeInternal, "the browser did not answer")
		return fmt.Errorf("cdpproxy: discover targets: %w", err)
	}
	p.wg.Add(4)
	go p.writer()
	go p.worker(p.tq)
	go p.worker(p.iq)
	go func() {
		defer p.wg.Done()
		select {
		case <-p.s.Done():
			p.end(closeGoingAway, "the session ended")
		case <-p.ctx.Done():
		}
	}()
	p.read()
	return nil
}

// read is the reader loop: one client message at a time, in order.
func (p *proxy) read() {
	idle := time.Duration(p.lim.IdleTimeout) * time.Second
	for p.ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(p.ctx, idle)
		raw, err := p.c.ReadMessage(rctx)
		timedOut := rctx.Err() == context.DeadlineExceeded && p.ctx.Err() == nil
		cancel()
		switch {
		case timedOut:
			p.end(closeNormal, fmt.Sprintf("idle for %d s", p.lim.IdleTimeout))
			return
		case err != nil:
			p.end(closeNormal, "the client closed")
			return
		case len(raw) > p.lim.MaxMessageBytes:
			p.end(closeTooBig, fmt.Sprintf("message of %d bytes over the limit of %d", len(raw), p.lim.MaxMessageBytes))
			return
		}
		p.handle(raw)
	}
}

// handle filters one message and sends it on its way.
func (p *proxy) handle(raw []byte) {
	m, perr := parse(raw)
	if perr != nil {
		p.answer(m, nil, perr)
		return
	}
	p.sv.metrics.message(m.Method)
	onTarget := m.SessionID != ""
	if onTarget {
		c := p.childOf(m.SessionID)
		if c == nil {
			p.refuse(m, refusal(m.Method, "not a session of this client"))
			return
		}
		// A browser session of the client's own (attachToBrowserTarget)
		// is filtered as the browser's.
		onTarget = c.typ != browserSession
	}
	r, cerr := decide(m.Method, onTarget)
	if cerr == nil {
		cerr = p.scope().checkScope(m.Method, m.Params)
	}
	if cerr != nil {
		p.refuse(m, cerr)
		return
	}
	switch r {
	case ruleForward:
		p.forward(m, m.Params)
	case ruleRewrite:
		p.rewrite(m)
	case ruleTarget:
		p.queue(p.tq, func() { p.target(m) })
	case ruleInput, ruleFenced:
		arrived := time.Now()
		p.queue(p.iq, func() { p.input(m, r, arrived) })
	}
}

func (p *proxy) refuse(m *message, e *cdpError) {
	p.sv.metrics.refusal(m.Method)
	p.answer(m, nil, e)
}

// queue hands fn to a worker, waiting while its queue is full.
func (p *proxy) queue(q chan func(), fn func()) {
	select {
	case q <- fn:
	case <-p.ctx.Done():
	}
}

func (p *proxy) worker(q chan func()) {
	defer p.wg.Done()
	for {
		select {
		case fn := <-q:
			fn()
		case <-p.ctx.Done():
			return
		}
	}
}

// forward sends m to Chromium with params and answers the client with
// Chromium's answer, under the client's id and session.
func (p *proxy) forward(m *message, params json.RawMessage) {
	p.forwardThen(m, params, nil)
}

// forwardThen is forward with a hook on the result before it is sent.
func (p *proxy) forwardThen(m *message, params json.RawMessage, then func(json.RawMessage)) {
	var pv any
	if len(params) > 0 {
		pv = jsonv2.Value(params)
	}
	shot := m.Method == "Page.captureScreenshot"
	if shot {
		// One screenshot in flight: its answer is the one copy held.
		select {
		case p.shot <- struct{}{}:
		case <-p.ctx.Done():
			return
		}
	}
	r, err := p.up.Send(p.ctx, p.upstream(m.SessionID), m.Method, pv)
	if err != nil {
		if shot {
			<-p.shot
		}
		p.answer(m, nil, fromErr(m.Method, err))
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if shot {
			defer func() { <-p.shot }()
		}
		res, err := r.Raw(p.ctx)
		if errors.Is(err, context.Canceled) {
			return
		}
		if err != nil {
			p.answer(m, nil, fromErr(m.Method, err))
			return
		}
		if then != nil {
			then(json.RawMessage(res))
		}
		p.answer(m, json.RawMessage(res), nil)
	}()
}

// upstream is the session a client's session is on Chromium: its
// browser sessions are the proxy's own browser session.
func (p *proxy) upstream(sessionID string) string {
	if c := p.childOf(sessionID); c != nil && c.typ == browserSession {
		return ""
	}
	return sessionID
}

// call runs a command of the proxy's own on Chromium and waits for it.
func (p *proxy) call(sessionID, method string, params any, res any) error {
	r, err := p.up.Send(p.ctx, sessionID, method, params)
	if err != nil {
		return err
	}
	return r.Decode(p.ctx, res)
}

// answer queues the reply to m.
func (p *proxy) answer(m *message, result json.RawMessage, e *cdpError) {
	if e == nil && result == nil {
		result = emptyResult
	}
	if e != nil {
		p.send(encode(reply{ID: m.ID, Error: e, SessionID: m.SessionID}))
		return
	}
	p.send(resultMessage(m.ID, result, m.SessionID))
}

// emit queues an event.
func (p *proxy) emit(method string, params json.RawMessage, sessionID string) {
	p.send(encode(event{Method: method, Params: params, SessionID: sessionID}))
}

// send queues one message; a client whose queue is full is too slow and
// is disconnected rather than slowing the session.
func (p *proxy) send(b []byte) {
	select {
	case p.out <- b:
	default:
		p.end(closePolicy, "slow client: the write queue is full")
	}
}

func (p *proxy) writer() {
	defer p.wg.Done()
	for {
		select {
		case b := <-p.out:
			wctx, cancel := context.WithTimeout(p.ctx, writeTimeout)
			err := p.c.WriteMessage(wctx, b)
			cancel()
			if err != nil {
				p.end(closePolicy, "slow or gone client: a write failed")
				return
			}
		case <-p.ctx.Done():
			return
		}
	}
}

// end records why the connection ends (the first reason wins) and stops it.
func (p *proxy) end(code int, why string) {
	p.mu.Lock()
	if p.why == "" {
		p.why, p.code = why, code
	}
	p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
	}
}

func (p *proxy) closeReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.why
}

func (p *proxy) addStop(fn func()) {
	p.mu.Lock()
	p.stops = append(p.stops, fn)
	p.mu.Unlock()
}

// shutdown releases everything the client held: its input (the producer's
// end lifts held keys and buttons), its Chromium connection (Chromium
// detaches its sessions, ends its interception and resumes what it
// paused), the session's download behavior, and closes the client.
func (p *proxy) shutdown() {
	p.end(closeNormal, "closed")
	p.mu.Lock()
	stops := p.stops
	p.stops = nil
	code, why, dl := p.code, p.why, p.downloads
	p.mu.Unlock()
	for _, s := range stops {
		s()
	}
	p.closeInput()
	p.up.Close()
	p.wg.Wait()
	if dl {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := p.s.RestoreDownloads(ctx); err != nil {
			p.log.Warn("restore the session's downloads", "err", err)
		}
		cancel()
	}
	_ = p.c.Close(code, why)
}

func (p *proxy) hasChild(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.children[id] != nil
}

func (p *proxy) childOf(id string) *child {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.children[id]
}

func (p *proxy) scope() scope {
	return scope{contextID: p.bctx, target: p.inScope, session: p.hasChild}
}

// onChildEvent forwards an attached session's events; a session attached
// under it (a frame or worker of the client's page) becomes the client's.
func (p *proxy) onChildEvent(sessionID string) func(*cdproto.Message) {
	return func(m *cdproto.Message) {
		switch m.Method {
		case cdproto.EventTargetAttachedToTarget:
			p.adopt(m.Params)
		case cdproto.EventTargetDetachedFromTarget:
			p.forget(m.Params)
		}
		p.emit(string(m.Method), json.RawMessage(m.Params), sessionID)
	}
}
