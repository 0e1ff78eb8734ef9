package signaling

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSlowViewerDropped: when the bounded queue is full the viewer is
// dropped at once instead of blocking the sender.
func TestSlowViewerDropped(t *testing.T) {
	accepted := make(chan *websocket.Conn, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		accepted <- ws
		<-release
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseNow()
	ws := <-accepted

	// No writer runs: the queue only fills.
	c := &conn{ws: ws, out: make(chan outFrame, queueSize), log: slog.New(slog.DiscardHandler)}
	for i := 0; i < queueSize; i++ {
		c.send(simpleMsg{Type: TypePong})
	}
	if c.closing {
		t.Fatal("dropped before the queue was full")
	}
	done := make(chan struct{})
	go func() {
		c.send(simpleMsg{Type: TypePong}) // must not block
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("send blocked on a full queue")
	}
	if !c.closing {
		t.Fatal("viewer not dropped")
	}
	if _, _, err := client.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("client socket not closed: %v", err)
	}
}
