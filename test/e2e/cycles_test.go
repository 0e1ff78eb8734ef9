package e2e

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

type processFigures struct {
	goroutines, openFiles, chromium, tempDirs int
}

func figures(t *testing.T, ctx context.Context, a *harness.Appliance) processFigures {
	t.Helper()
	var st struct {
		Status struct {
			Process struct {
				Goroutines int `json:"goroutines"`
				OpenFiles  int `json:"openFiles"`
			} `json:"process"`
		} `json:"status"`
	}
	if err := a.Do(ctx, http.MethodGet, "/api/v1/status", "", &st); err != nil {
		t.Fatal(err)
	}
	f := processFigures{goroutines: st.Status.Process.Goroutines, openFiles: st.Status.Process.OpenFiles}
	for _, pid := range harness.Descendants(a.Cmd.Process.Pid) {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.HasPrefix(string(b), "chrom") && harness.Alive(pid) {
			f.chromium++
		}
	}
	// The appliance's own TMPDIR: Chromium profiles, session download dirs.
	ents, _ := os.ReadDir(a.TempDir)
	f.tempDirs = len(ents)
	return f
}

// TestCreateCloseCycles creates and closes 100 sessions and checks that
// nothing grows: Chromium processes, the core's goroutines and open files,
// temporary directories.
func TestCreateCloseCycles(t *testing.T) {
	p := pages(t)
	a, _ := startWithSession(t, p.URL+"/solid?c=224466")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cycle := func() {
		s, err := postSession(ctx, a, p.URL+"/solid?c=664422")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Do(ctx, http.MethodDelete, "/api/v1/sessions/"+s.ID, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	settle := func() processFigures {
		time.Sleep(1500 * time.Millisecond) // renderers exit, Pion and CDP goroutines wind down
		return figures(t, ctx, a)
	}
	for range 5 { // warm-up: first-use allocations are not leaks
		cycle()
	}
	before := settle()
	start := time.Now()
	for range 100 {
		cycle()
	}
	elapsed := time.Since(start)
	after := settle()
	t.Logf("100 create/close cycles in %v (%v each); before %+v, after %+v", elapsed.Round(time.Millisecond), (elapsed / 100).Round(time.Millisecond), before, after)
	if after.chromium > before.chromium {
		t.Errorf("Chromium processes grew: %d → %d", before.chromium, after.chromium)
	}
	if after.goroutines > before.goroutines+10 {
		t.Errorf("goroutines grew: %d → %d", before.goroutines, after.goroutines)
	}
	if after.openFiles > before.openFiles+5 {
		t.Errorf("open files grew: %d → %d", before.openFiles, after.openFiles)
	}
	if after.tempDirs > before.tempDirs {
		t.Errorf("temporary directories grew: %d → %d", before.tempDirs, after.tempDirs)
	}
}
