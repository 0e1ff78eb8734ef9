package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// The CDP bench: the same Playwright script (goto, cdpSteps clicks,
// cdpSteps fills, a screenshot) through Tabcast's CDP endpoint and, in
// the same run, straight on the appliance Chromium's own DevTools socket
// (the floor). Runs alternate; p50/p95 per step and the p95 ratio.
const (
	cdpSteps   = 50
	cdpRounds  = 3  // runs of each mode, alternating
	cdpShots   = 10 // screenshots per run (one would give 3 samples)
	cdpTimeout = 10 * time.Minute
	// cdpPace is an untimed gap before each timed step, in both modes: a
	// Playwright click is three input events (move, press, release) and
	// the dispatcher's per-producer budget refills 8 a second, so an
	// unpaced run would time the budget, not the endpoint.
	cdpPace = 400 * time.Millisecond
	// Targets of the issue: p95 ratio for click and fill, and screenshot.
	cdpTargetInput      = 1.3
	cdpTargetScreenshot = 1.1
)

type cdpStep struct {
	Step         string  `json:"step"`
	Samples      int     `json:"samples"`
	TabcastP50Ms float64 `json:"tabcastP50Ms"`
	TabcastP95Ms float64 `json:"tabcastP95Ms"`
	FloorP50Ms   float64 `json:"floorP50Ms"`
	FloorP95Ms   float64 `json:"floorP95Ms"`
	RatioP95     float64 `json:"ratioP95"`
	Target       float64 `json:"targetRatioP95,omitempty"`
}

type cdpReport struct {
	When       time.Time `json:"when"`
	Machine    string    `json:"machine"`
	Method     string    `json:"method"`
	Clients    string    `json:"clients"`
	Steps      []cdpStep `json:"steps"`
	Checks     []string  `json:"checks,omitempty"`
	LoadBefore string    `json:"loadAverageBefore"`
	LoadAfter  string    `json:"loadAverageAfter"`
}

// cdpOnly runs the CDP bench alone (bench -only cdp).
func cdpOnly() error {
	_, err := cdpBench(context.Background())
	return err
}

// cdpBench runs the CDP bench on an appliance of its own, prints its
// table and writes bench/results/cdp.json.
func cdpBench(parent context.Context) (*cdpReport, error) {
	ctx, cancel := context.WithTimeout(parent, cdpTimeout)
	defer cancel()
	rep := &cdpReport{When: time.Now().UTC(), LoadBefore: loadAverage(),
		Machine: machine(),
		Method: fmt.Sprintf("wall time of each Playwright call in the client process (performance.now()); %d runs of each mode, alternating; "+
			"goto + %d× click + %d× fill + %d× screenshot per run, each timed step after an untimed %v pause; "+
			"tabcast: connectOverCDP(https://…/api/v1/sessions/ID/cdp) over TLS with a Bearer token, the streamed page; "+
			"floor: connectOverCDP on the appliance Chromium's own DevTools socket, a page of its own in a new context, 1280x720",
			cdpRounds, cdpSteps, cdpSteps, cdpShots, cdpPace)}
	err := cdpMeasure(ctx, rep)
	rep.LoadAfter = loadAverage()
	printCDP(rep)
	out := filepath.Join("bench", "results", "cdp.json")
	b, _ := json.MarshalIndent(rep, "", "  ")
	if werr := os.WriteFile(out, append(b, '\n'), 0o644); werr != nil && err == nil {
		err = werr
	}
	fmt.Println("written:", out)
	return rep, err
}

const cdpBenchPage = `<!doctype html><title>cdp bench</title>
<style>html,body{margin:0;height:100%;background:#234;color:#fff;font:24px sans-serif}
#inc{position:absolute;left:100px;top:100px;width:240px;height:120px;font:32px sans-serif}
#note{position:absolute;left:100px;top:300px;width:600px;font:24px sans-serif}#n{position:absolute;left:400px;top:140px}</style>
<button id=inc>+1</button><span id=n>0</span><input id=note>
<script>document.getElementById('inc').addEventListener('click', () => {
  const n = document.getElementById('n'); n.textContent = Number(n.textContent) + 1; });</script>`

func cdpMeasure(ctx context.Context, rep *cdpReport) error {
	npm, err := filepath.Abs(filepath.Join("test", "npm"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(npm, "node_modules", "playwright-core", "package.json")); err != nil {
		return errors.New("playwright-core is not installed in test/npm: run `make npm-deps`")
	}
	if b, err := os.ReadFile(filepath.Join(npm, "node_modules", "playwright-core", "package.json")); err == nil {
		var v struct{ Version string }
		_ = json.Unmarshal(b, &v)
		rep.Clients = "playwright-core " + v.Version + ", node " + nodeVersion()
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, cdpBenchPage) }))
	defer page.Close()
	tmp, err := os.MkdirTemp("", "tabcast-bench-cdp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
	a, err := harness.Start(sctx, tmp, "server.tls=on", "agent.cdp=true", "browser.startURL="+page.URL+"/bench", "input.allowLoopbackHosts=127.0.0.1")
	var sess harness.SessionSnapshot
	if err == nil {
		if sess, err = a.DefaultSession(sctx); err != nil {
			a.Kill()
		}
	}
	scancel()
	if err != nil {
		return fmt.Errorf("appliance: %w", err)
	}
	defer a.Stop(15 * time.Second)
	token, err := cdpBenchToken(ctx, a)
	if err != nil {
		return err
	}
	floorWS, err := applianceDevTools(a)
	if err != nil {
		return fmt.Errorf("the appliance Chromium's DevTools socket: %w", err)
	}
	samples := map[string]map[string][]float64{"tabcast": {}, "floor": {}}
	for round := range cdpRounds {
		for _, mode := range []string{"tabcast", "floor"} {
			env := []string{"MODE=" + mode, "PAGE=" + page.URL, "N=" + fmt.Sprint(cdpSteps), "SHOTS=" + fmt.Sprint(cdpShots), "PACE_MS=" + fmt.Sprint(cdpPace.Milliseconds()),
				"NODE_EXTRA_CA_CERTS=" + filepath.Join(a.DataDir, "tls-cert.pem")}
			if mode == "tabcast" {
				env = append(env, "CDP_URL="+a.URL+"/api/v1/sessions/"+sess.ID+"/cdp", "TOKEN="+token)
			} else {
				env = append(env, "CDP_URL="+floorWS)
			}
			r, err := runBenchScript(ctx, npm, env)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, mode, err)
			}
			for _, step := range []string{"goto", "click", "fill", "screenshot"} {
				samples[mode][step] = append(samples[mode][step], r.steps[step]...)
			}
			if r.count != cdpSteps {
				rep.Checks = append(rep.Checks, fmt.Sprintf("round %d, %s: the counter shows %d after %d clicks", round+1, mode, r.count, cdpSteps))
			}
			fmt.Fprintf(os.Stderr, "bench: cdp round %d %s done (connect %.0f ms)\n", round+1, mode, r.connect)
		}
	}
	for _, step := range []string{"goto", "click", "fill", "screenshot"} {
		tc, fl := samples["tabcast"][step], samples["floor"][step]
		s := cdpStep{Step: step, Samples: len(tc), TabcastP50Ms: pct(tc, 50), TabcastP95Ms: pct(tc, 95), FloorP50Ms: pct(fl, 50), FloorP95Ms: pct(fl, 95)}
		if s.FloorP95Ms > 0 {
			s.RatioP95 = float64(int(s.TabcastP95Ms/s.FloorP95Ms*100+0.5)) / 100
		}
		switch step {
		case "click", "fill":
			s.Target = cdpTargetInput
		case "screenshot":
			s.Target = cdpTargetScreenshot
		}
		rep.Steps = append(rep.Steps, s)
	}
	return nil
}

type benchRun struct {
	connect float64
	steps   map[string][]float64
	count   int
}

// runBenchScript runs test/npm/bench-flow.mjs once and reads its RESULT.
func runBenchScript(ctx context.Context, dir string, env []string) (benchRun, error) {
	cmd := exec.CommandContext(ctx, "node", "bench-flow.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return benchRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return benchRun{}, err
	}
	var raw string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			raw = rest
		}
	}
	werr := cmd.Wait()
	if raw == "" {
		return benchRun{}, fmt.Errorf("no result (%v): %.2000s", werr, stderr.String())
	}
	var out struct {
		Connect    float64   `json:"connect"`
		Goto       []float64 `json:"goto"`
		Click      []float64 `json:"click"`
		Fill       []float64 `json:"fill"`
		Screenshot []float64 `json:"screenshot"`
		Count      int       `json:"count"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return benchRun{}, err
	}
	return benchRun{connect: out.Connect, count: out.Count, steps: map[string][]float64{
		"goto": out.Goto, "click": out.Click, "fill": out.Fill, "screenshot": out.Screenshot}}, nil
}

// cdpBenchToken makes an admin token with the cdp scope through the
// admin's login.
func cdpBenchToken(ctx context.Context, a *harness.Appliance) (string, error) {
	c, csrf, err := a.Login(ctx, "admin", a.AdminPassword)
	if err != nil {
		return "", err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/api/v1/tokens",
		strings.NewReader(`{"name":"cdp-bench","user":"admin","role":"admin","scopes":["read","control","cdp"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", csrf)
	req.AddCookie(c)
	resp, err := a.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		return "", fmt.Errorf("create the bench's token: HTTP %d", resp.StatusCode)
	}
	return out.Token, nil
}

func nodeVersion() string {
	b, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func printCDP(r *cdpReport) {
	fmt.Printf("\nCDP endpoint bench — %s, %s (%s)\n", r.Machine, r.Clients, r.When.Format(time.RFC3339))
	fmt.Printf("  %-12s %8s %20s %20s %10s %8s\n", "step", "samples", "tabcast p50/p95 ms", "floor p50/p95 ms", "p95 ratio", "target")
	for _, s := range r.Steps {
		target := ""
		if s.Target > 0 {
			target = fmt.Sprintf("≤ %.1f×", s.Target)
		}
		fmt.Printf("  %-12s %8d %9.1f / %-8.1f %9.1f / %-8.1f %9.2f× %8s\n", s.Step, s.Samples, s.TabcastP50Ms, s.TabcastP95Ms, s.FloorP50Ms, s.FloorP95Ms, s.RatioP95, target)
	}
	for _, c := range r.Checks {
		fmt.Println("  check:", c)
	}
	fmt.Printf("  load average before %s, after %s\n", r.LoadBefore, r.LoadAfter)
}
