package input

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// pipe is a DevTools connection of the executor's own to its page, for
// commands sent back to back, each without waiting for the previous reply
// (a click's press and release): chromedp's calls are one round trip each.
// Chromium runs a connection's commands in the order they arrive, so the
// page sees them in that order. The pipe enables no domain: it carries
// replies only. Its reader goroutine is owned by the pipe and ends at
// close (or when Chromium closes the socket).
type pipe struct {
	conn *remote.Conn
	wmu  sync.Mutex // orders the writes

	mu      sync.Mutex
	next    int64
	waiting map[int64]chan *cdproto.Message
	err     error // set once the reader stopped: every later send fails
	done    chan struct{}
}

var errPipeClosed = errors.New("input pipe closed")

func dialPipe(ctx context.Context, url string) (*pipe, error) {
	c, err := remote.DialContext(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("input pipe: %w", err)
	}
	p := &pipe{conn: c, waiting: map[int64]chan *cdproto.Message{}, done: make(chan struct{})}
	go p.read()
	return p, nil
}

func (p *pipe) read() {
	defer close(p.done)
	for {
		msg := new(cdproto.Message)
		if err := p.conn.Read(context.Background(), msg); err != nil {
			p.mu.Lock()
			p.err = errPipeClosed
			for id, ch := range p.waiting {
				close(ch)
				delete(p.waiting, id)
			}
			p.mu.Unlock()
			return
		}
		if msg.ID == 0 {
			continue // an event (the pipe subscribes to none)
		}
		p.mu.Lock()
		ch := p.waiting[msg.ID]
		delete(p.waiting, msg.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- msg // buffered: never blocks
		}
	}
}

// reply is one sent command's answer to come.
type reply <-chan *cdproto.Message

// send writes one command and returns at once. Sends are written in the
// order they are made.
func (p *pipe) send(method string, params any) (reply, error) {
	b, err := jsonv2.Marshal(params, chromedp.DefaultMarshalOptions)
	if err != nil {
		return nil, err
	}
	ch := make(chan *cdproto.Message, 1)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return nil, p.err
	}
	p.next++
	id := p.next
	p.waiting[id] = ch
	p.mu.Unlock()
	if err := p.conn.Write(context.Background(), &cdproto.Message{ID: id, Method: cdproto.MethodType(method), Params: b}); err != nil {
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
		return nil, fmt.Errorf("input pipe: %w", err)
	}
	return ch, nil
}

// wait waits for r's answer: nil, the command's protocol error, or the
// context's or the pipe's end.
func (r reply) wait(ctx context.Context) error {
	select {
	case msg, ok := <-r:
		if !ok {
			return errPipeClosed
		}
		if msg.Error != nil {
			return msg.Error
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closed reports whether the reader stopped.
func (p *pipe) closed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

// close ends the connection and waits for the reader.
func (p *pipe) close() {
	_ = p.conn.Close()
	<-p.done
}
