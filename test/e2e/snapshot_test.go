package e2e

import (
	"context"
	"encoding/json"
	"image/jpeg"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSnapshotPushed: the signaling socket carries the session snapshot
// after the welcome and again, with a higher revision, when the page
// changes.
func TestSnapshotPushed(t *testing.T) {
	p := pages(t)
	a, s := startWithSession(t, p.URL+"/solid?c=123456")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.URL, "http")+"/api/v1/sessions/"+s.ID+"/signal",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + a.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","codec":"vp8","codecs":["vp8"],"interactive":false}`)); err != nil {
		t.Fatal(err)
	}
	type snap struct {
		Type     string
		Revision uint64
		Session  struct{ ID, State, Title string }
	}
	var seen []string // the titles pushed, for a failure's message
	next := func(cond func(snap) bool) snap {
		t.Helper()
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v (titles pushed: %q)\n%s", err, seen, a.LogTail(3000))
			}
			var m snap
			_ = json.Unmarshal(b, &m)
			if m.Type == "snapshot" {
				seen = append(seen, m.Session.Title)
			}
			if m.Type == "snapshot" && cond(m) {
				return m
			}
		}
	}
	first := next(func(m snap) bool { return true })
	if first.Session.ID != s.ID || first.Session.State != "ready" || first.Revision == 0 {
		t.Fatalf("first snapshot: %+v", first)
	}
	// The title follows the page's load event: it may come a push later.
	if first.Session.Title != "123456" {
		first = next(func(m snap) bool { return m.Session.Title == "123456" })
	}
	if err := a.Do(ctx, "POST", "/api/v1/sessions/"+s.ID+"/navigate", `{"url":"`+p.URL+`/solid?c=abcdef"}`, nil); err != nil {
		t.Fatal(err)
	}
	later := next(func(m snap) bool { return m.Session.Title == "abcdef" })
	if later.Revision <= first.Revision {
		t.Errorf("revision %d after the navigation, was %d", later.Revision, first.Revision)
	}
}

// TestThumbnailWithoutViewers: the grid's stills move even when nobody
// watches a session (a small screenshot, at most one a second).
func TestThumbnailWithoutViewers(t *testing.T) {
	p := pages(t)
	a, s := startWithSession(t, p.URL+"/anim")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first, second string
	if err := a.DoRaw(ctx, "GET", "/api/v1/sessions/"+s.ID+"/thumbnail", &first); err != nil {
		t.Fatal(err)
	}
	img, err := jpeg.Decode(strings.NewReader(first))
	if err != nil {
		t.Fatalf("thumbnail is not a JPEG: %v", err)
	}
	if w := img.Bounds().Dx(); w != 480 {
		t.Errorf("thumbnail %d px wide, want 480", w)
	}
	time.Sleep(1200 * time.Millisecond)
	if err := a.DoRaw(ctx, "GET", "/api/v1/sessions/"+s.ID+"/thumbnail", &second); err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Error("the thumbnail of an animating page did not change in 1.2 s")
	}
}
