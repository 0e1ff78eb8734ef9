package httpapi

import (
	"context"
	"sync"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/tabcast/tabcast/core/errcode"
)

// maxCloseReason is what a WebSocket close frame holds of a reason (125
// bytes of payload less the 2-byte code).
const maxCloseReason = 123

// cdpConn is a client's WebSocket as the proxy sees it (cdpproxy.Conn):
// one CDP JSON message per text frame. The read limit is set on ws before
// it is handed over; a larger message makes the library close with 1009.
type cdpConn struct {
	ws *websocket.Conn

	closeOnce sync.Once
	closeErr  error
}

// ReadMessage returns the next text message. A binary frame is not CDP:
// the connection is closed with 1003 and the error says why.
func (c *cdpConn) ReadMessage(ctx context.Context) ([]byte, error) {
	typ, msg, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		_ = c.Close(int(websocket.StatusUnsupportedData), "CDP messages are JSON text frames")
		return nil, errcode.New(errcode.BadEnvelope, "a binary frame: CDP messages are JSON text frames")
	}
	return msg, nil
}

// WriteMessage sends one message as a text frame (the proxy has one
// writer, as cdpproxy.Conn asks).
func (c *cdpConn) WriteMessage(ctx context.Context, msg []byte) error {
	return c.ws.Write(ctx, websocket.MessageText, msg)
}

// Close ends the connection with code and reason (cut to what a close
// frame holds, on a rune boundary). Only the first call closes: the proxy
// closes with its reason and the HTTP side closes again as a safety net.
func (c *cdpConn) Close(code int, reason string) error {
	c.closeOnce.Do(func() {
		c.closeErr = c.ws.Close(websocket.StatusCode(code), cutReason(reason))
	})
	return c.closeErr
}

func cutReason(s string) string {
	if len(s) <= maxCloseReason {
		return s
	}
	s = s[:maxCloseReason]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
