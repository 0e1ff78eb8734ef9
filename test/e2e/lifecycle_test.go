package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// lifecycleSnap is the part of a session snapshot the lifecycle tests read.
type lifecycleSnap struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	TerminalReason string `json:"terminalReason"`
}

func getSession(ctx context.Context, a *harness.Appliance, id string) (lifecycleSnap, error) {
	var out struct {
		Session lifecycleSnap `json:"session"`
	}
	err := a.Do(ctx, http.MethodGet, "/api/v1/sessions/"+id, "", &out)
	return out.Session, err
}

func postSession(ctx context.Context, a *harness.Appliance, url string) (lifecycleSnap, error) {
	var out struct {
		Session lifecycleSnap `json:"session"`
	}
	err := a.Do(ctx, http.MethodPost, "/api/v1/sessions", `{"url":"`+url+`"}`, &out)
	return out.Session, err
}

// watchFrames has a Go viewer watch id for 2 s and checks frames came.
func watchFrames(ctx context.Context, t *testing.T, a *harness.Appliance, id string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := viewer.Watch(wctx, viewer.Options{BaseURL: a.URL, Token: a.Token, HTTPClient: a.Client, SessionID: id, Codec: "vp8", For: 2 * time.Second})
	if err != nil {
		t.Fatalf("watch %s: %v\n%s", id, err, a.LogTail(3000))
	}
	// An animating page at the default frame rate gives far more; this
	// only says the stream is alive.
	if r.Frames < 5 {
		t.Errorf("session %s: %d frames in 2 s, want >= 5", id, r.Frames)
	}
}

// TestLifecycleCapacityAndTerminalSnapshot: over sessions.max a new session
// is refused with 429 capacity_exceeded while the live ones keep
// streaming; a closed session keeps a readable terminal snapshot and no
// longer holds a slot.
func TestLifecycleCapacityAndTerminalSnapshot(t *testing.T) {
	p := pages(t)
	a, def := startWithSession(t, p.URL+"/anim", "sessions.max=2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	second, err := postSession(ctx, a, p.URL+"/anim")
	if err != nil || second.State != "ready" {
		t.Fatalf("second session: %+v %v", second, err)
	}

	err = a.Do(ctx, http.MethodPost, "/api/v1/sessions", `{"url":"`+p.URL+`/anim"}`, nil)
	he, ok := err.(*harness.HTTPError)
	if !ok || he.Status != http.StatusTooManyRequests || !strings.Contains(he.Body, `"code":"capacity_exceeded"`) {
		t.Fatalf("third session: got %v, want 429 capacity_exceeded", err)
	}
	for _, id := range []string{def.ID, second.ID} {
		if s, err := getSession(ctx, a, id); err != nil || s.State != "ready" {
			t.Fatalf("session %s after the refusal: %+v %v", id, s, err)
		}
		watchFrames(ctx, t, a, id)
	}

	if err := a.Do(ctx, http.MethodDelete, "/api/v1/sessions/"+second.ID, "", nil); err != nil {
		t.Fatalf("close: %v", err)
	}
	s, err := getSession(ctx, a, second.ID)
	if err != nil || s.State != "closed" || s.TerminalReason != "closed_by_user" {
		t.Fatalf("closed session snapshot: %+v %v", s, err)
	}
	third, err := postSession(ctx, a, p.URL+"/solid?c=336699")
	if err != nil || third.State != "ready" {
		t.Fatalf("new session after a close: %+v %v", third, err)
	}
}
