package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// TestSessionsAreIsolated: cookies and downloads of one session never
// reach another, and a session's download dir goes with it.
func TestSessionsAreIsolated(t *testing.T) {
	p := pages(t)
	a, sa := startWithSession(t, p.URL+"/solid?c=112233")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := postSession(ctx, a, p.URL+"/solid?c=332211")
	if err != nil {
		t.Fatal(err)
	}
	nav := func(id, url string) error {
		return a.Do(ctx, "POST", "/api/v1/sessions/"+id+"/navigate", `{"url":"`+url+`"}`, nil)
	}
	title := func(id string) string {
		var out struct{ Session harness.SessionSnapshot }
		if err := a.Do(ctx, "GET", "/api/v1/sessions/"+id, "", &out); err != nil {
			t.Fatal(err)
		}
		return out.Session.Title
	}
	waitTitle := func(id, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for title(id) != want {
			if time.Now().After(deadline) {
				t.Fatalf("session %s: title %q, want %q", id, title(id), want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A cookie set in A is not sent from B.
	if err := nav(sa.ID, p.URL+"/setcookie?v=alpha"); err != nil {
		t.Fatal(err)
	}
	waitTitle(sa.ID, "set alpha")
	for _, c := range []struct{ id, want string }{{sa.ID, "cookie alpha"}, {sb.ID, "cookie none"}} {
		if err := nav(c.id, p.URL+"/cookie"); err != nil {
			t.Fatal(err)
		}
		waitTitle(c.id, c.want)
	}

	// A download lands in its own session's directory only.
	_ = nav(sa.ID, p.URL+"/file.txt?n=a") // a download aborts the navigation
	var files []struct {
		Name string
		Size int64
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var out struct {
			Downloads []struct {
				Name string
				Size int64
			}
		}
		if err := a.Do(ctx, "GET", "/api/v1/sessions/"+sa.ID+"/downloads", "", &out); err != nil {
			t.Fatal(err)
		}
		if files = out.Downloads; len(files) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(files) != 1 || files[0].Name != "report-a.txt" {
		t.Fatalf("session A downloads: %+v", files)
	}
	var body string
	if err := a.DoRaw(ctx, "GET", "/api/v1/sessions/"+sa.ID+"/downloads/report-a.txt", &body); err != nil || body != "hello download a" {
		t.Fatalf("fetch the download: %q, %v", body, err)
	}
	var outB struct{ Downloads []any }
	if err := a.Do(ctx, "GET", "/api/v1/sessions/"+sb.ID+"/downloads", "", &outB); err != nil || len(outB.Downloads) != 0 {
		t.Fatalf("session B downloads: %+v, %v", outB.Downloads, err)
	}
	for _, bad := range []string{"..%2Freport-a.txt", "%2Fetc%2Fpasswd", ".hidden", "report-a.txt.crdownload"} {
		err := a.DoRaw(ctx, "GET", "/api/v1/sessions/"+sa.ID+"/downloads/"+bad, &body)
		if he, ok := err.(*harness.HTTPError); !ok || he.Status != 404 {
			t.Errorf("download %q: %v, want 404", bad, err)
		}
	}
	// The dir goes with the session.
	dirs, _ := filepath.Glob(filepath.Join(a.TempDir, "tabcast-downloads-"+sa.ID+"-*"))
	if len(dirs) != 1 {
		t.Fatalf("session A's download dir: %v", dirs)
	}
	if err := a.Do(ctx, "DELETE", "/api/v1/sessions/"+sa.ID, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Errorf("download dir %s left after close: %v", dirs[0], err)
	}
}

// TestPersistentProfile: a session on a named profile keeps its cookies
// for the next session on that profile, across an appliance restart; one
// session per profile at a time; ephemeral sessions never see them.
func TestPersistentProfile(t *testing.T) {
	p := pages(t)
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func() *harness.Appliance {
		a, err := harness.Start(ctx, logDir, "browser.startURL="+p.URL+"/solid?c=101010", "input.allowLoopbackHosts=127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start()
	create := func(a *harness.Appliance, body string) (string, error) {
		var out struct {
			Session struct{ ID, Title, Profile string }
		}
		err := a.Do(ctx, "POST", "/api/v1/sessions", body, &out)
		return out.Session.ID, err
	}
	// title waits a little for the page title to reach the snapshot.
	title := func(a *harness.Appliance, id string) string {
		var last string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var out struct{ Session harness.SessionSnapshot }
			if err := a.Do(ctx, "GET", "/api/v1/sessions/"+id, "", &out); err != nil {
				t.Fatal(err)
			}
			if last = out.Session.Title; strings.HasPrefix(last, "cookie ") {
				break
			}
		}
		return last
	}
	first, err := create(a, `{"url":"`+p.URL+`/setcookie?v=kept","profile":"work"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create(a, `{"url":"`+p.URL+`/cookie","profile":"work"}`); err == nil || !strings.Contains(err.Error(), "profile_in_use") {
		t.Errorf("a second session on an open profile: %v", err)
	}
	if _, err := create(a, `{"profile":"../etc"}`); err == nil || !strings.Contains(err.Error(), "invalid_argument") {
		t.Errorf("a bad profile name: %v", err)
	}
	if err := a.Do(ctx, "DELETE", "/api/v1/sessions/"+first, "", nil); err != nil {
		t.Fatal(err)
	}
	second, err := create(a, `{"url":"`+p.URL+`/cookie","profile":"work"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := title(a, second); got != "cookie kept" {
		t.Errorf("the next session on the profile: %q, want cookie kept", got)
	}
	eph, err := create(a, `{"url":"`+p.URL+`/cookie"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := title(a, eph); got != "cookie none" {
		t.Errorf("an ephemeral session: %q, want cookie none", got)
	}
	if err := a.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Across a restart of the appliance.
	a = start()
	t.Cleanup(func() { _ = a.Stop(15 * time.Second) })
	third, err := create(a, `{"url":"`+p.URL+`/cookie","profile":"work"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := title(a, third); got != "cookie kept" {
		t.Errorf("after a restart: %q, want cookie kept", got)
	}
}
