package peer

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pion/webrtc/v4"
)

// Input DataChannels of an interactive peer (docs/protocol.md,
// "DataChannels"). The appliance creates them before the offer.
const (
	ChannelControl = "control" // ordered, reliable
	ChannelPointer = "pointer" // unordered, maxRetransmits 0
	ChannelState   = "state"   // ordered, reliable; appliance → viewer only
)

// Back-pressure (bytes buffered in a channel, not yet acknowledged by the
// viewer).
const (
	// PointerHighWater: pointer sends are dropped once the pointer channel
	// holds more than this...
	PointerHighWater = 64 << 10
	// PointerLowWater: ...until it drains to this.
	PointerLowWater = 16 << 10
	// StateHighWater: state messages wait (coalesced per key) while the
	// state channel holds more than this, until it drains to StateLowWater.
	StateHighWater = 64 << 10
	StateLowWater  = 16 << 10
	// ControlMaxBuffered: a control message due while the control channel
	// holds more than this means the viewer does not read its acks; the
	// peer is unhealthy and closes.
	ControlMaxBuffered = 1 << 20
	// ControlQueue bounds control messages waiting for the channel's
	// writer; a full queue is unhealthy too.
	ControlQueue = 256
	// MaxMessageSize is the largest DataChannel message the peer receives
	// (advertised as a=max-message-size). It is above the envelope limits
	// so that an oversized envelope still gets a too_large answer; a bigger
	// message closes its channel.
	MaxMessageSize = 2 << 20
	// maxStateKeys bounds distinct pending state keys.
	maxStateKeys = 32
)

var (
	// ErrNotInteractive is returned by the Send methods of a peer built
	// without Options.Interactive.
	ErrNotInteractive = errors.New("peer has no input channels")
	// ErrUnhealthy is returned by SendControl once the control channel was
	// found over ControlMaxBuffered (or its queue full); the peer closes.
	ErrUnhealthy = errors.New("control channel unhealthy")
)

// InputStats counts the input channels' traffic.
type InputStats struct {
	ControlIn, PointerIn, StateIn uint64 // messages received (StateIn are discarded)
	ControlOut, StateOut          uint64 // messages sent
	PointerOut, PointerDropped    uint64 // pointer messages sent / dropped by back-pressure
	StateCoalesced, StateDropped  uint64 // state messages replaced by a newer one of their key / dropped past maxStateKeys
}

// channels is the input side of an interactive peer. Each sending channel
// has one writer: control and state a goroutine each (bounded queue, map),
// pointer the caller under pointerMu.
type channels struct {
	control, pointer, state *webrtc.DataChannel

	done      chan struct{} // closed by Peer.Close
	ctlOpen   chan struct{} // closed when control opens
	stateOpen chan struct{}
	ctlQ      chan []byte
	failCh    chan string   // cap 1: why the control channel is unhealthy
	stateWake chan struct{} // cap 1: something is pending
	stateLow  chan struct{} // cap 1: state drained to StateLowWater
	wg        sync.WaitGroup
	openOnce  [2]sync.Once
	closeOnce [3]sync.Once
	failOnce  sync.Once

	unhealthy     atomic.Bool
	pointerMu     sync.Mutex
	pointerPaused atomic.Bool

	stateMu      sync.Mutex
	statePending map[string][]byte
	stateOrder   []string // pending keys, oldest update first

	controlIn, pointerIn, stateIn, controlOut, stateOut atomic.Uint64
	pointerOut, pointerDropped, stateCoalesced          atomic.Uint64
	stateDropped                                        atomic.Uint64
}

func ptrTo[T any](v T) *T { return &v }

// createChannels adds the three channels to pc (before the offer, so they
// are in it) and starts the control and state writers.
func (p *Peer) createChannels() error {
	ch := &channels{
		done: make(chan struct{}), ctlOpen: make(chan struct{}), stateOpen: make(chan struct{}),
		ctlQ: make(chan []byte, ControlQueue), failCh: make(chan string, 1),
		stateWake: make(chan struct{}, 1), stateLow: make(chan struct{}, 1),
		statePending: map[string][]byte{},
	}
	// p.ch is set only once all three exist: an error leaves no writer.
	var err error
	if ch.control, err = p.pc.CreateDataChannel(ChannelControl, &webrtc.DataChannelInit{Ordered: ptrTo(true)}); err != nil {
		return fmt.Errorf("create control channel: %w", err)
	}
	if ch.pointer, err = p.pc.CreateDataChannel(ChannelPointer, &webrtc.DataChannelInit{
		Ordered: ptrTo(false), MaxRetransmits: ptrTo(uint16(0)),
	}); err != nil {
		return fmt.Errorf("create pointer channel: %w", err)
	}
	if ch.state, err = p.pc.CreateDataChannel(ChannelState, &webrtc.DataChannelInit{Ordered: ptrTo(true)}); err != nil {
		return fmt.Errorf("create state channel: %w", err)
	}
	p.ch = ch

	for i, dc := range []*webrtc.DataChannel{ch.control, ch.pointer, ch.state} {
		label := dc.Label()
		dc.OnOpen(func() {
			switch label {
			case ChannelControl:
				ch.openOnce[0].Do(func() { close(ch.ctlOpen) })
			case ChannelState:
				ch.openOnce[1].Do(func() { close(ch.stateOpen) })
			}
			p.channelEvent(label, true)
		})
		dc.OnClose(func() {
			ch.closeOnce[i].Do(func() { p.channelEvent(label, false) })
		})
	}
	ch.control.OnMessage(func(m webrtc.DataChannelMessage) {
		ch.controlIn.Add(1)
		if p.opts.OnControl != nil && p.enter() {
			defer p.cbWG.Done()
			p.opts.OnControl(m.Data)
		}
	})
	ch.pointer.OnMessage(func(m webrtc.DataChannelMessage) {
		ch.pointerIn.Add(1)
		if p.opts.OnPointer != nil && p.enter() {
			defer p.cbWG.Done()
			p.opts.OnPointer(m.Data)
		}
	})
	// The state channel is one-way; what a viewer sends on it is counted
	// and discarded.
	ch.state.OnMessage(func(webrtc.DataChannelMessage) { ch.stateIn.Add(1) })

	ch.pointer.SetBufferedAmountLowThreshold(PointerLowWater)
	ch.pointer.OnBufferedAmountLow(func() { ch.pointerPaused.Store(false) })
	ch.state.SetBufferedAmountLowThreshold(StateLowWater)
	ch.state.OnBufferedAmountLow(func() {
		select {
		case ch.stateLow <- struct{}{}:
		default:
		}
	})

	ch.wg.Add(2)
	go p.controlWriter()
	go p.stateWriter()
	return nil
}

func (p *Peer) channelEvent(label string, open bool) {
	if p.opts.OnChannel == nil || !p.enter() {
		return
	}
	defer p.cbWG.Done()
	p.opts.OnChannel(label, open)
}

// liveChannels returns the peer's DataChannel set, or why messages cannot
// be queued on it.
func (p *Peer) liveChannels() (*channels, error) {
	ch := p.ch
	if ch == nil {
		return nil, ErrNotInteractive
	}
	select {
	case <-ch.done:
		return nil, ErrClosed
	default:
	}
	return ch, nil
}

// SendControl queues b for the control channel (in order, reliable). It
// never blocks: a full queue makes the peer unhealthy (the viewer does not
// read its acks) and it closes.
func (p *Peer) SendControl(b []byte) error {
	ch, err := p.liveChannels()
	if err != nil {
		return err
	}
	if ch.unhealthy.Load() {
		return ErrUnhealthy
	}
	select {
	case ch.ctlQ <- b:
		return nil
	default:
		p.fail(fmt.Sprintf("control queue over %d messages", ControlQueue))
		return ErrUnhealthy
	}
}

// fail marks the control channel unhealthy and has the control writer
// report it and close the peer connection (not from the caller, which may
// be a Pion callback).
func (p *Peer) fail(reason string) {
	ch := p.ch
	ch.failOnce.Do(func() {
		ch.unhealthy.Store(true)
		ch.failCh <- reason
	})
}

// controlWriter owns every write to the control channel.
func (p *Peer) controlWriter() {
	ch := p.ch
	defer ch.wg.Done()
	select {
	case <-ch.ctlOpen:
	case <-ch.done:
		return
	case reason := <-ch.failCh:
		p.unhealthyClose(reason)
		return
	}
	for {
		select {
		case <-ch.done:
			return
		case reason := <-ch.failCh:
			p.unhealthyClose(reason)
			return
		case b := <-ch.ctlQ:
			if ch.control.ReadyState() != webrtc.DataChannelStateOpen {
				// Closed by the viewer: the producer has ended, late acks
				// have nowhere to go (and BufferedAmount keeps its last
				// value, which must not count as unhealthy).
				continue
			}
			if n := ch.control.BufferedAmount(); n > ControlMaxBuffered {
				p.fail(fmt.Sprintf("control channel over %d bytes buffered", ControlMaxBuffered))
				continue // failCh now holds the reason
			}
			if err := ch.control.Send(b); err != nil {
				// Closed channel or a message over the viewer's
				// max-message-size: this one is lost, the channel's close
				// (if any) is reported through OnChannel.
				p.log.Debug("control send failed", "err", err, "bytes", len(b))
				continue
			}
			ch.controlOut.Add(1)
		}
	}
}

func (p *Peer) unhealthyClose(reason string) {
	p.log.Warn("viewer peer unhealthy, closing it", "reason", reason)
	if p.opts.OnUnhealthy != nil && p.enter() {
		p.opts.OnUnhealthy(reason)
		p.cbWG.Done()
	}
	// The state change to "closed" reaches OnStateChange (unless Close
	// already began), which is how the owner learns the peer ended.
	if err := p.pc.Close(); err != nil {
		p.log.Debug("close unhealthy peer", "err", err)
	}
}

// SendState queues b for the state channel under key. While the channel
// is busy (over StateHighWater buffered) only the newest message per key
// is kept, and a replaced key moves behind the others, so the viewer sees
// every key's latest value in the order of the latest updates.
func (p *Peer) SendState(key string, b []byte) error {
	ch, err := p.liveChannels()
	if err != nil {
		return err
	}
	ch.stateMu.Lock()
	if _, ok := ch.statePending[key]; ok {
		ch.stateOrder = slices.DeleteFunc(ch.stateOrder, func(k string) bool { return k == key })
		ch.stateCoalesced.Add(1)
	} else if len(ch.stateOrder) >= maxStateKeys {
		oldest := ch.stateOrder[0]
		ch.stateOrder = ch.stateOrder[1:]
		delete(ch.statePending, oldest)
		ch.stateDropped.Add(1)
	}
	ch.statePending[key] = b
	ch.stateOrder = append(ch.stateOrder, key)
	ch.stateMu.Unlock()
	select {
	case ch.stateWake <- struct{}{}:
	default:
	}
	return nil
}

func (ch *channels) popState() ([]byte, bool) {
	ch.stateMu.Lock()
	defer ch.stateMu.Unlock()
	if len(ch.stateOrder) == 0 {
		return nil, false
	}
	key := ch.stateOrder[0]
	ch.stateOrder = ch.stateOrder[1:]
	b := ch.statePending[key]
	delete(ch.statePending, key)
	return b, true
}

// stateWriter owns every write to the state channel.
func (p *Peer) stateWriter() {
	ch := p.ch
	defer ch.wg.Done()
	select {
	case <-ch.stateOpen:
	case <-ch.done:
		return
	}
	for {
		select {
		case <-ch.done:
			return
		case <-ch.stateWake:
		}
		for {
			if ch.state.BufferedAmount() > StateHighWater {
				select {
				case <-ch.done:
					return
				case <-ch.stateLow:
				}
				continue
			}
			b, ok := ch.popState()
			if !ok {
				break
			}
			if err := ch.state.Send(b); err != nil {
				p.log.Debug("state send failed", "err", err)
				continue
			}
			ch.stateOut.Add(1)
		}
	}
}

// SendPointer sends b on the pointer channel unless it holds more than
// PointerHighWater; it then drops pointer messages (returns false) until the
// channel drains to PointerLowWater.
func (p *Peer) SendPointer(b []byte) bool {
	ch := p.ch
	if ch == nil {
		return false
	}
	ch.pointerMu.Lock()
	defer ch.pointerMu.Unlock()
	if ch.pointerPaused.Load() {
		ch.pointerDropped.Add(1)
		return false
	}
	if ch.pointer.BufferedAmount() > PointerHighWater {
		ch.pointerPaused.Store(true)
		// The low event may have fired between the check and the pause.
		if ch.pointer.BufferedAmount() > PointerLowWater {
			ch.pointerDropped.Add(1)
			return false
		}
		ch.pointerPaused.Store(false)
	}
	if err := ch.pointer.Send(b); err != nil {
		ch.pointerDropped.Add(1)
		return false
	}
	ch.pointerOut.Add(1)
	return true
}

// Interactive reports whether the peer has input channels.
func (p *Peer) Interactive() bool { return p.ch != nil }

// RemoteMaxMessageSize is the largest message the viewer accepts
// (its a=max-message-size); 0 before the SCTP association is up.
func (p *Peer) RemoteMaxMessageSize() int {
	if s := p.pc.SCTP(); s != nil {
		return int(s.GetCapabilities().MaxMessageSize)
	}
	return 0
}

// InputStats returns the input channels' counters (zero if not
// interactive).
func (p *Peer) InputStats() InputStats {
	ch := p.ch
	if ch == nil {
		return InputStats{}
	}
	return InputStats{
		ControlIn: ch.controlIn.Load(), PointerIn: ch.pointerIn.Load(), StateIn: ch.stateIn.Load(),
		ControlOut: ch.controlOut.Load(), StateOut: ch.stateOut.Load(),
		PointerOut: ch.pointerOut.Load(), PointerDropped: ch.pointerDropped.Load(),
		StateCoalesced: ch.stateCoalesced.Load(), StateDropped: ch.stateDropped.Load(),
	}
}

// stop ends the writers; Peer.Close calls it once, before closing pc.
func (ch *channels) stop() { close(ch.done) }
