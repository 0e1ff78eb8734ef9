package tabcapture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/websocket"
)

// cdpConn is a minimal DevTools protocol client on the browser-level
// WebSocket: calls (optionally on a flat session) and a callback for events.
type cdpConn struct {
	ws      *websocket.Conn
	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpReply
	onEvent func(method, session string, params json.RawMessage)
	done    chan struct{}
	err     error
}

type cdpReply struct {
	Result json.RawMessage
	Err    error
}

type cdpMsg struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	} `json:"error,omitempty"`
}

func dialCDP(ctx context.Context, url string, onEvent func(method, session string, params json.RawMessage)) (*cdpConn, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	c := &cdpConn{ws: ws, pending: map[int64]chan cdpReply{}, onEvent: onEvent, done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *cdpConn) read() {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = err
		for id, ch := range c.pending {
			ch <- cdpReply{Err: fmt.Errorf("devtools connection lost: %w", err)}
			delete(c.pending, id)
		}
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		var raw []byte
		_, raw, err = c.ws.Read(context.Background())
		if err != nil {
			return
		}
		var m cdpMsg
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if m.ID != 0 {
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				r := cdpReply{Result: m.Result}
				if m.Error != nil {
					r.Err = fmt.Errorf("%s (%d) %s", m.Error.Message, m.Error.Code, m.Error.Data)
				}
				ch <- r
			}
			continue
		}
		if m.Method != "" && c.onEvent != nil {
			c.onEvent(m.Method, m.SessionID, m.Params)
		}
	}
}

// call sends method with params on session ("" = browser) and decodes the
// result into out (may be nil).
func (c *cdpConn) call(ctx context.Context, session, method string, params, out any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan cdpReply, 1)
	c.mu.Lock()
	if c.err != nil || c.pending == nil {
		c.mu.Unlock()
		return errors.New("devtools connection closed")
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(cdpMsg{ID: id, Method: method, SessionID: session, Params: p})
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return err
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return fmt.Errorf("%s: %w", method, r.Err)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (c *cdpConn) close() {
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	<-c.done
}

type targetInfo struct {
	TargetID string `json:"targetId"`
	Type     string `json:"type"`
	URL      string `json:"url"`
}

func (c *cdpConn) targets(ctx context.Context) ([]targetInfo, error) {
	var r struct {
		TargetInfos []targetInfo `json:"targetInfos"`
	}
	err := c.call(ctx, "", "Target.getTargets", map[string]any{}, &r)
	return r.TargetInfos, err
}

func (c *cdpConn) attach(ctx context.Context, targetID string) (string, error) {
	var r struct {
		SessionID string `json:"sessionId"`
	}
	err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": targetID, "flatten": true}, &r)
	return r.SessionID, err
}

// evaluate runs expr (awaiting a promise) on session and decodes its JSON
// value into out (may be nil). A thrown error becomes the error.
func (c *cdpConn) evaluate(ctx context.Context, session, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := c.call(ctx, session, "Runtime.evaluate", map[string]any{
		"expression": expr, "awaitPromise": true, "returnByValue": true,
	}, &r)
	if err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil && e.Exception.Description != "" {
			msg = e.Exception.Description
		}
		return errors.New(msg)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}
