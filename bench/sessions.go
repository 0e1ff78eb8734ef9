package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// sessionReport: session create → first decoded frame, with Chromium
// already running (warm) and with Chromium relaunched by the create (cold),
// and the memory one more session costs.
type sessionReport struct {
	Runs          int     `json:"runs"`
	WarmP50Ms     float64 `json:"warmCreateToFirstFrameP50Ms"`
	WarmP95Ms     float64 `json:"warmCreateToFirstFrameP95Ms"`
	ColdP50Ms     float64 `json:"coldCreateToFirstFrameP50Ms"`
	ColdP95Ms     float64 `json:"coldCreateToFirstFrameP95Ms"`
	PerSessionMB  float64 `json:"memoryPerExtraSessionPssMB"`
	ExtraSessions int     `json:"extraSessionsMeasured"`
}

const sessionRuns = 20

// createToFirstFrame creates a session on pageURL, watches it and returns
// the time from the create call to the first decoded frame; the session is
// closed again.
func createToFirstFrame(ctx context.Context, a *harness.Appliance, pageURL string) (time.Duration, error) {
	start := time.Now()
	var out struct {
		Session harness.SessionSnapshot `json:"session"`
	}
	if err := a.Do(ctx, http.MethodPost, "/api/v1/sessions", `{"url":"`+pageURL+`"}`, &out); err != nil {
		return 0, err
	}
	defer a.Do(ctx, http.MethodDelete, "/api/v1/sessions/"+out.Session.ID, "", nil)
	created := time.Since(start)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := viewer.Watch(wctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: out.Session.ID, Codec: "h264", For: 10 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	return created + r.FirstFrame, nil
}

// killChromium SIGKILLs the appliance's Chromium browser process (the one
// whose parent is the core), so the next create relaunches it.
func killChromium(a *harness.Appliance) error {
	for _, pid := range harness.Descendants(a.Cmd.Process.Pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		comm := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
		var state string
		var ppid int
		fmt.Sscan(s[strings.LastIndexByte(s, ')')+2:], &state, &ppid)
		if strings.HasPrefix(comm, "chrom") && ppid == a.Cmd.Process.Pid {
			return syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return fmt.Errorf("no Chromium browser process under the core")
}

func percentiles(ds []time.Duration) (p50, p95 float64) {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return ms(ds[(len(ds)-1)*50/100]), ms(ds[(len(ds)-1)*95/100])
}

func sessionBench(ctx context.Context, a *harness.Appliance, pageURL string) (*sessionReport, error) {
	rep := &sessionReport{Runs: sessionRuns}
	// Memory: three more sessions on the animating page, one viewer each.
	before := sampleTree(a.Cmd.Process.Pid)
	var ids []string
	for range 3 {
		var out struct {
			Session harness.SessionSnapshot `json:"session"`
		}
		if err := a.Do(ctx, http.MethodPost, "/api/v1/sessions", `{"url":"`+pageURL+`"}`, &out); err != nil {
			return rep, fmt.Errorf("extra session: %w", err)
		}
		ids = append(ids, out.Session.ID)
	}
	time.Sleep(2 * time.Second)
	after := sampleTree(a.Cmd.Process.Pid)
	rep.ExtraSessions = len(ids)
	rep.PerSessionMB = float64((after.core.pss+after.chromium.pss)-(before.core.pss+before.chromium.pss)) / float64(len(ids)) / (1 << 20)
	for _, id := range ids {
		_ = a.Do(ctx, http.MethodDelete, "/api/v1/sessions/"+id, "", nil)
	}

	var warm, cold []time.Duration
	for range sessionRuns {
		d, err := createToFirstFrame(ctx, a, pageURL)
		if err != nil {
			return rep, fmt.Errorf("warm: %w", err)
		}
		warm = append(warm, d)
	}
	rep.WarmP50Ms, rep.WarmP95Ms = percentiles(warm)
	for range sessionRuns {
		if err := killChromium(a); err != nil {
			return rep, err
		}
		time.Sleep(300 * time.Millisecond) // the crash is noticed; the next create relaunches
		d, err := createToFirstFrame(ctx, a, pageURL)
		if err != nil {
			return rep, fmt.Errorf("cold: %w", err)
		}
		cold = append(cold, d)
	}
	rep.ColdP50Ms, rep.ColdP95Ms = percentiles(cold)
	return rep, nil
}

func printSessions(r *sessionReport) {
	if r == nil {
		return
	}
	fmt.Printf("Session create → first decoded frame (%d runs each, H.264, Go viewer)\n", r.Runs)
	fmt.Printf("  warm Chromium  p50 %7.1f ms   p95 %7.1f ms   (target p95 ≤ 1500 ms)\n", r.WarmP50Ms, r.WarmP95Ms)
	fmt.Printf("  cold Chromium  p50 %7.1f ms   p95 %7.1f ms   (target p95 ≤ 3000 ms)\n", r.ColdP50Ms, r.ColdP95Ms)
	fmt.Printf("  memory per extra session (PSS, core + Chromium, %d sessions): %.1f MB\n\n", r.ExtraSessions, r.PerSessionMB)
}
