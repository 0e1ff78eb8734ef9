package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/tabcast/tabcast/test/harness"
)

// Agent action latency: click-by-ref and fill through the agent API
// (POST /api/v1/sessions/{id}/agent, request sent → HTTP answer read) and
// snapshots of a large page, beside the same steps done by a plain
// chromedp program on the same Chromium (the floor), in the same run.

const (
	agentRuns    = 50
	agentWarmup  = 5
	agentBlocks  = 5 // the runs alternate tabcast/floor in blocks of agentRuns/agentBlocks
	agentSnaps   = 5
	agentBurst   = 20
	agentTarget  = 1.3
	agentTimeout = 4 * time.Minute
	// Pacing keeps the timed agent actions inside the dispatcher's
	// per-producer budget (burst 16, refill 8/s): a click costs one credit,
	// a fill two. The burst row shows the unpaced case.
	agentClickPace = 260 * time.Millisecond
	agentFillPace  = 650 * time.Millisecond
	// The unpaced agent rows send groups that fit in the burst: a click
	// costs one credit, a fill two; before each group the budget refills.
	agentHotGroup  = 5
	agentHotRefill = 2 * time.Second
)

type agentStep struct {
	Step         string  `json:"step"`
	Runs         int     `json:"runs"`
	TabcastP50Ms float64 `json:"tabcastP50Ms"`
	TabcastP95Ms float64 `json:"tabcastP95Ms"`
	FloorP50Ms   float64 `json:"floorP50Ms"`
	FloorP95Ms   float64 `json:"floorP95Ms"`
	// RatioP95 is tabcast p95 over floor p95.
	RatioP95 float64 `json:"ratioP95"`
	Floor    string  `json:"floorSteps"`
	// Unjudged says why a row is not held to the target (it shows
	// something else: a floor doing other steps, or the rate budget).
	Unjudged string `json:"unjudged,omitempty"`
}

type agentSnap struct {
	Kind         string  `json:"kind"`
	Runs         int     `json:"runs"`
	TabcastP50Ms float64 `json:"tabcastP50Ms"`
	TabcastP95Ms float64 `json:"tabcastP95Ms"`
	TextBytes    int     `json:"tabcastTextBytes"`
	BodyBytes    int     `json:"tabcastResponseBytes"`
	Nodes        int     `json:"tabcastNodes"`
	Refs         int     `json:"tabcastRefs"`
	Truncated    bool    `json:"tabcastTruncated"`
	FloorP50Ms   float64 `json:"floorP50Ms"`
	FloorP95Ms   float64 `json:"floorP95Ms"`
	FloorBytes   int     `json:"floorAxTreeJsonBytes"`
	FloorNodes   int     `json:"floorAxNodes"`
	FloorShown   int     `json:"floorAxNodesNotIgnored"`
	RatioP95     float64 `json:"ratioP95"`
}

type agentReport struct {
	When      time.Time   `json:"when"`
	Machine   string      `json:"machine"`
	Floor     string      `json:"floor"`
	Method    string      `json:"method"`
	Target    float64     `json:"targetRatio"`
	LargeRows int         `json:"largePageRows"`
	Steps     []agentStep `json:"steps"`
	Snapshots []agentSnap `json:"snapshots"`
	// ClicksAckedEarly counts timed clicks whose answer came before the
	// counter showed the click (read right after by an agent "get").
	ClicksAckedEarly int      `json:"clicksAnsweredBeforeCounterChanged"`
	Checks           []string `json:"checks"`
	LoadBefore       string   `json:"loadAverageBefore"`
	LoadAfter        string   `json:"loadAverageAfter"`
	WallSeconds      float64  `json:"wallSeconds"`
}

// agentOnly runs just the agent part (bench -only agent).
func agentOnly() error {
	_, err := agentBench(context.Background())
	return err
}

// agentBench runs the agent part on its own appliance, prints its table
// and writes bench/results/agent.json.
func agentBench(parent context.Context) (*agentReport, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, agentTimeout)
	defer cancel()
	rep := &agentReport{When: start.UTC(), Target: agentTarget, LargeRows: largeRows, LoadBefore: loadAverage(),
		Machine: machine(),
		Method: "tabcast: wall time of one POST /api/v1/sessions/{id}/agent (HTTPS, keep-alive) until the answer body is read; " +
			"floor: wall time of the same CDP steps from a plain chromedp client; runs alternate in blocks; agent actions paced to stay inside the input budget; " +
			"the floor's steps run back to back, and again (the \"floor paced as tabcast\" rows) after the same idle gaps as the agent's; " +
			"the \"both back to back\" rows time the agent's steps back to back too, in groups of 5 inside its budget"}
	err := agentMeasure(ctx, rep)
	rep.LoadAfter = loadAverage()
	rep.WallSeconds = r1(time.Since(start).Seconds())
	printAgent(rep)
	if werr := writeAgent(rep); werr != nil && err == nil {
		err = werr
	}
	return rep, err
}

func writeAgent(rep *agentReport) error {
	out := filepath.Join("bench", "results", "agent.json")
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("written:", out)
	return nil
}

func agentMeasure(ctx context.Context, rep *agentReport) error {
	srv := agentFixtures()
	defer srv.Close()
	tmp, err := os.MkdirTemp("", "tabcast-bench-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
	a, err := harness.Start(sctx, tmp, "browser.startURL="+srv.URL+"/form", "input.allowLoopbackHosts=127.0.0.1")
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
	tc := &agentClient{a: a, id: sess.ID}

	// The floor: a chromedp client on the appliance's own Chromium (found
	// through its DevToolsActivePort), else on a headless Chromium of its own.
	fl, err := floorOnAppliance(a)
	if err != nil {
		rep.Checks = append(rep.Checks, "appliance Chromium unreachable for the floor: "+err.Error())
		if fl, err = floorOwnChromium(); err != nil {
			return fmt.Errorf("floor chromium: %w", err)
		}
	}
	defer fl.close()
	rep.Floor = fl.desc
	if err := fl.navigate(ctx, srv.URL+"/form"); err != nil {
		return fmt.Errorf("floor navigate: %w", err)
	}

	// Refs from an interactive snapshot.
	if _, err := tc.do(ctx, map[string]any{"command": "wait", "selector": "#inc", "timeoutMs": 10000}); err != nil {
		return fmt.Errorf("tabcast wait for fixture: %w", err)
	}
	snap, err := tc.do(ctx, map[string]any{"command": "snapshot", "interactive": true})
	if err != nil {
		return fmt.Errorf("tabcast snapshot: %w", err)
	}
	btnRef, noteRef, err := agentRefs(snap.Data)
	if err != nil {
		return err
	}
	btn, err := fl.backendNode(ctx, "#inc")
	if err != nil {
		return fmt.Errorf("floor: #inc: %w", err)
	}
	note, err := fl.backendNode(ctx, "#note")
	if err != nil {
		return fmt.Errorf("floor: #note: %w", err)
	}

	clickReq := map[string]any{"command": "click", "ref": btnRef}
	fillReq := func(text string) map[string]any {
		return map[string]any{"command": "fill", "ref": noteRef, "text": text}
	}
	var tcClicks, tcFills, flClicks, flFills, flFocusFills, flPacedClicks, flPacedFills, tcHotClicks, tcHotFills []time.Duration
	tcCount, flCount := 0, 0
	pace := newPacer()

	// Warm-up, unmeasured: connections, AX/DOM agents, first event paths.
	for i := 0; i < agentWarmup; i++ {
		pace.wait(agentClickPace)
		if _, err := tc.do(ctx, clickReq); err != nil {
			return fmt.Errorf("tabcast warm-up click: %w", err)
		}
		tcCount++
		if err := fl.click(ctx, btn); err != nil {
			return fmt.Errorf("floor warm-up click: %w", err)
		}
		flCount++
		pace.wait(agentFillPace)
		if _, err := tc.do(ctx, fillReq("warm-up")); err != nil {
			return fmt.Errorf("tabcast warm-up fill: %w", err)
		}
		if err := fl.fill(ctx, note, "warm-up", false); err != nil {
			return fmt.Errorf("floor warm-up fill: %w", err)
		}
	}

	per := agentRuns / agentBlocks
	for blk := 0; blk < agentBlocks; blk++ {
		for i := 0; i < per; i++ {
			pace.wait(agentClickPace)
			r, err := tc.do(ctx, clickReq)
			if err != nil {
				return fmt.Errorf("tabcast click: %w", err)
			}
			tcClicks = append(tcClicks, r.took)
			tcCount++
			// Untimed: has the page seen the click when the answer came?
			if g, err := tc.do(ctx, map[string]any{"command": "get", "what": "text", "selector": "#count"}); err == nil {
				var d struct{ Text string }
				_ = json.Unmarshal(g.Data, &d)
				if d.Text != strconv.Itoa(tcCount) {
					rep.ClicksAckedEarly++
				}
			}
		}
		for i := 0; i < per; i++ {
			t0 := time.Now()
			if err := fl.click(ctx, btn); err != nil {
				return fmt.Errorf("floor click: %w", err)
			}
			flClicks = append(flClicks, time.Since(t0))
			flCount++
		}
		// The agent's clicks back to back, as the floor's are (groups inside
		// the budget), and the floor's after the same idle gap as the
		// agent's paced ones: an action after a pause costs more than one
		// right after another, whoever sends it.
		for i := 0; i < per; i++ {
			if i%agentHotGroup == 0 {
				tc.hotStart(ctx)
			}
			r, err := tc.do(ctx, clickReq)
			if err != nil {
				return fmt.Errorf("tabcast unpaced click: %w", err)
			}
			tcHotClicks = append(tcHotClicks, r.took)
			tcCount++
		}
		pace.wait(0)
		for i := 0; i < per; i++ {
			pace.wait(agentClickPace)
			t0 := time.Now()
			if err := fl.click(ctx, btn); err != nil {
				return fmt.Errorf("floor paced click: %w", err)
			}
			flPacedClicks = append(flPacedClicks, time.Since(t0))
			flCount++
		}
		for i := 0; i < per; i++ {
			text := fmt.Sprintf("note %d-%d", blk, i)
			pace.wait(agentFillPace)
			r, err := tc.do(ctx, fillReq(text))
			if err != nil {
				return fmt.Errorf("tabcast fill: %w", err)
			}
			tcFills = append(tcFills, r.took)
		}
		for i := 0; i < per; i++ {
			text := fmt.Sprintf("note %d-%d", blk, i)
			t0 := time.Now()
			if err := fl.fill(ctx, note, text, false); err != nil {
				return fmt.Errorf("floor fill: %w", err)
			}
			flFills = append(flFills, time.Since(t0))
			t0 = time.Now()
			if err := fl.fill(ctx, note, text, true); err != nil {
				return fmt.Errorf("floor fill (DOM.focus): %w", err)
			}
			flFocusFills = append(flFocusFills, time.Since(t0))
		}
		for i := 0; i < per; i++ {
			pace.wait(agentFillPace)
			t0 := time.Now()
			if err := fl.fill(ctx, note, fmt.Sprintf("note %d-%d", blk, i), false); err != nil {
				return fmt.Errorf("floor paced fill: %w", err)
			}
			flPacedFills = append(flPacedFills, time.Since(t0))
		}
		for i := 0; i < per; i++ {
			if i%agentHotGroup == 0 {
				tc.hotStart(ctx)
			}
			r, err := tc.do(ctx, fillReq(fmt.Sprintf("note %d-%d", blk, i)))
			if err != nil {
				return fmt.Errorf("tabcast unpaced fill: %w", err)
			}
			tcHotFills = append(tcHotFills, r.took)
		}
		pace.wait(0)
	}
	lastText := fmt.Sprintf("note %d-%d", agentBlocks-1, per-1)

	// Unpaced: back-to-back fills, as an agent that does not wait would send.
	time.Sleep(2 * time.Second) // let the budget refill
	var tcBurst, flBurst []time.Duration
	for i := 0; i < agentBurst; i++ {
		r, err := tc.do(ctx, fillReq(fmt.Sprintf("burst %d", i)))
		if err != nil {
			return fmt.Errorf("tabcast burst fill: %w", err)
		}
		tcBurst = append(tcBurst, r.took)
	}
	for i := 0; i < agentBurst; i++ {
		t0 := time.Now()
		if err := fl.fill(ctx, note, fmt.Sprintf("burst %d", i), false); err != nil {
			return fmt.Errorf("floor burst fill: %w", err)
		}
		flBurst = append(flBurst, time.Since(t0))
	}
	burstText := fmt.Sprintf("burst %d", agentBurst-1)

	// Correctness: every click counted, the last fill in the field.
	time.Sleep(300 * time.Millisecond)
	tcText, tcValue := tc.getText(ctx, "#count", "text"), tc.getText(ctx, "#note", "value")
	flText, _ := evalShort[string](fl.ctx, "document.getElementById('count').textContent")
	flValue, _ := evalShort[string](fl.ctx, "document.getElementById('note').value")
	rep.Checks = append(rep.Checks,
		fmt.Sprintf("tabcast counter %s (want %d), field %q (want %q)", tcText, tcCount, tcValue, burstText),
		fmt.Sprintf("floor counter %s (want %d), field %q (want %q)", flText, flCount, flValue, burstText),
		fmt.Sprintf("last paced fill text %q", lastText))

	rep.Steps = append(rep.Steps,
		agentRow("click by ref", tcClicks, flClicks, "DOM.scrollIntoViewIfNeeded + DOM.getBoxModel + Input.dispatchMouseEvent pressed/released at the centre"),
		agentRow("fill", tcFills, flFills, "click as above (focuses) + Ctrl+A (selectAll) down/up + Input.insertText over the selection"),
		unjudged(agentRow("fill, floor focusing with DOM.focus", tcFills, flFocusFills, "DOM.focus + Ctrl+A down/up + Input.insertText over the selection"),
			"other steps: tabcast's fill clicks the field, as a person would"),
		unjudged(agentRow(fmt.Sprintf("fill, back-to-back ×%d (unpaced)", agentBurst), tcBurst, flBurst, "as fill, no pacing"),
			"rate budget: a fill is 2 credits of 16, refilled at 8/s"),
		agentRow("click by ref, floor paced as tabcast", tcClicks, flPacedClicks, "as click by ref, each after the same idle gap as tabcast's clicks"),
		agentRow("fill, floor paced as tabcast", tcFills, flPacedFills, "as fill, each after the same idle gap as tabcast's fills"),
		agentRow(fmt.Sprintf("click by ref, both back to back (tabcast ×%d)", agentHotGroup), tcHotClicks, flClicks, "as click by ref; tabcast's in groups of 5 inside the budget"),
		agentRow(fmt.Sprintf("fill, both back to back (tabcast ×%d)", agentHotGroup), tcHotFills, flFills, "as fill; tabcast's in groups of 5 inside the budget"),
	)

	// Snapshots of the large page.
	if _, err := tc.do(ctx, map[string]any{"command": "navigate", "url": srv.URL + "/large"}); err != nil {
		return fmt.Errorf("tabcast navigate: %w", err)
	}
	if err := fl.navigate(ctx, srv.URL+"/large"); err != nil {
		return fmt.Errorf("floor navigate: %w", err)
	}
	kinds := []struct {
		name string
		req  map[string]any
	}{
		{"full (default limits)", map[string]any{"command": "snapshot"}},
		{"full, maxNodes -1", map[string]any{"command": "snapshot", "maxNodes": -1}},
		{"interactive", map[string]any{"command": "snapshot", "interactive": true}},
	}
	tcSnaps := make([][]time.Duration, len(kinds))
	var flSnaps []time.Duration
	snaps := make([]agentSnap, len(kinds))
	var flAX accessibility.GetFullAXTreeResult
	for i := -1; i < agentSnaps; i++ { // i == -1: warm-up
		for k, kd := range kinds {
			r, err := tc.do(ctx, kd.req)
			if err != nil {
				return fmt.Errorf("tabcast snapshot %s: %w", kd.name, err)
			}
			if i >= 0 {
				tcSnaps[k] = append(tcSnaps[k], r.took)
			}
			var d struct {
				Text     string `json:"text"`
				Snapshot struct {
					NodeCount int  `json:"nodeCount"`
					RefCount  int  `json:"refCount"`
					Truncated bool `json:"truncated"`
				} `json:"snapshot"`
			}
			if err := json.Unmarshal(r.Data, &d); err != nil {
				return fmt.Errorf("snapshot data: %w", err)
			}
			snaps[k].Kind, snaps[k].TextBytes, snaps[k].BodyBytes = kd.name, len(d.Text), r.bytes
			snaps[k].Nodes, snaps[k].Refs, snaps[k].Truncated = d.Snapshot.NodeCount, d.Snapshot.RefCount, d.Snapshot.Truncated
		}
		t0 := time.Now()
		ax, err := fl.axTree(ctx)
		if err != nil {
			return fmt.Errorf("floor getFullAXTree: %w", err)
		}
		if i >= 0 {
			flSnaps = append(flSnaps, time.Since(t0))
		}
		flAX = ax
	}
	axJSON, _ := json.Marshal(flAX)
	shown := 0
	for _, n := range flAX.Nodes {
		if !n.Ignored {
			shown++
		}
	}
	fp50, fp95 := percentiles(flSnaps)
	for k := range snaps {
		s := &snaps[k]
		s.Runs = len(tcSnaps[k])
		s.TabcastP50Ms, s.TabcastP95Ms = percentiles(tcSnaps[k])
		s.FloorP50Ms, s.FloorP95Ms = fp50, fp95
		s.FloorBytes, s.FloorNodes, s.FloorShown = len(axJSON), len(flAX.Nodes), shown
		s.RatioP95 = agentRatio(s.TabcastP95Ms, s.FloorP95Ms)
	}
	rep.Snapshots = snaps
	return nil
}

func unjudged(s agentStep, why string) agentStep {
	s.Unjudged = why
	return s
}

func agentRow(step string, tc, fl []time.Duration, floor string) agentStep {
	s := agentStep{Step: step, Runs: len(tc), Floor: floor}
	s.TabcastP50Ms, s.TabcastP95Ms = percentiles(append([]time.Duration(nil), tc...))
	s.FloorP50Ms, s.FloorP95Ms = percentiles(append([]time.Duration(nil), fl...))
	s.RatioP95 = agentRatio(s.TabcastP95Ms, s.FloorP95Ms)
	return s
}

func agentRatio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return math.Round(100*a/b) / 100
}

// agentRefs finds the refs of the fixture's button and text field in a
// snapshot's data.snapshot.nodes tree.
func agentRefs(data json.RawMessage) (button, textbox string, err error) {
	type node struct {
		Ref      string  `json:"ref"`
		Role     string  `json:"role"`
		Name     string  `json:"name"`
		Children []*node `json:"children"`
	}
	var d struct {
		Text     string `json:"text"`
		Snapshot struct {
			Nodes []*node `json:"nodes"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return "", "", err
	}
	var walk func([]*node)
	walk = func(ns []*node) {
		for _, n := range ns {
			switch {
			case n.Role == "button" && n.Name == "Increment" && button == "":
				button = n.Ref
			case n.Role == "textbox" && n.Name == "Note" && textbox == "":
				textbox = n.Ref
			}
			walk(n.Children)
		}
	}
	walk(d.Snapshot.Nodes)
	if button == "" || textbox == "" {
		return "", "", fmt.Errorf("no button \"Increment\" / textbox \"Note\" refs in the snapshot:\n%s", d.Text)
	}
	return button, textbox, nil
}

// pacer spaces the agent's timed actions.
type pacer struct{ last time.Time }

func newPacer() *pacer { return &pacer{} }

func (p *pacer) wait(gap time.Duration) {
	if d := time.Until(p.last.Add(gap)); d > 0 {
		time.Sleep(d)
	}
	p.last = time.Now()
}

// agentClient calls the agent API of one session.
type agentClient struct {
	a  *harness.Appliance
	id string
}

type agentAnswer struct {
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	took  time.Duration
	bytes int
}

func (c *agentClient) do(ctx context.Context, req map[string]any) (*agentAnswer, error) {
	body, _ := json.Marshal(req)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(rctx, http.MethodPost, c.a.URL+"/api/v1/sessions/"+c.id+"/agent", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+c.a.Token)
	t0 := time.Now()
	resp, err := c.a.Client.Do(hr)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	took := time.Since(t0)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var r agentAnswer
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%v: HTTP %d: %.300s", req["command"], resp.StatusCode, b)
	}
	if resp.StatusCode != http.StatusOK || r.Error != nil || !r.OK {
		return nil, fmt.Errorf("%v: HTTP %d: %.300s", req["command"], resp.StatusCode, b)
	}
	r.took, r.bytes = took, len(b)
	return &r, nil
}

// hotStart starts a group of back-to-back agent actions: it lets the
// budget refill, then sends an untimed read (no budget), so that the
// group's first action does not come after an idle gap either.
func (c *agentClient) hotStart(ctx context.Context) {
	time.Sleep(agentHotRefill)
	_, _ = c.do(ctx, map[string]any{"command": "get", "what": "title"})
}

func (c *agentClient) getText(ctx context.Context, sel, what string) string {
	r, err := c.do(ctx, map[string]any{"command": "get", "what": what, "selector": sel})
	if err != nil {
		return "error: " + err.Error()
	}
	var d map[string]any
	_ = json.Unmarshal(r.Data, &d)
	return fmt.Sprint(d[what])
}

// floorClient is the plain chromedp program: one tab, driven with CDP.
type floorClient struct {
	ctx   context.Context
	desc  string
	close func()
}

// applianceDevTools reads the DevTools URL of the appliance's Chromium
// from DevToolsActivePort in its --user-data-dir.
func applianceDevTools(a *harness.Appliance) (string, error) {
	for _, pid := range harness.Descendants(a.Cmd.Process.Pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "chrom") {
			continue
		}
		dir, child := "", false
		for _, arg := range args[1:] {
			if strings.HasPrefix(arg, "--type=") {
				child = true
			}
			if v, ok := strings.CutPrefix(arg, "--user-data-dir="); ok {
				dir = v
			}
		}
		if child || dir == "" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort"))
		if err != nil {
			return "", err
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) < 2 {
			return "", fmt.Errorf("DevToolsActivePort: %q", raw)
		}
		return "ws://127.0.0.1:" + strings.TrimSpace(lines[0]) + strings.TrimSpace(lines[1]), nil
	}
	return "", fmt.Errorf("no Chromium browser process under the appliance")
}

// floorOnAppliance opens a tab of its own (own browser context and window,
// 1280x720, as the appliance opens a session's page) in the appliance's
// Chromium.
func floorOnAppliance(a *harness.Appliance) (*floorClient, error) {
	ws, err := applianceDevTools(a)
	if err != nil {
		return nil, err
	}
	actx, cancelA := remote.NewAllocator(context.Background(), ws, remote.NoModifyURL)
	root, cancelRoot := chromedp.NewContext(actx)
	fail := func(err error) (*floorClient, error) { cancelRoot(); cancelA(); return nil, err }
	yes := true
	bc, err := chromedp.CallBrowser(root, target.CreateBrowserContext, target.CreateBrowserContextParams{DisposeOnDetach: &yes})
	if err != nil {
		return fail(err)
	}
	tr, err := chromedp.CallBrowser(root, target.CreateTarget, target.CreateTargetParams{
		URL: "about:blank", BrowserContextID: bc.BrowserContextID, Width: 1280, Height: 720, NewWindow: &yes,
	})
	if err != nil {
		return fail(err)
	}
	tctx, cancelT := chromedp.NewContext(root, chromedp.WithTargetID(tr.TargetID))
	if err := chromedp.Do(tctx); err != nil {
		cancelT()
		return fail(err)
	}
	return &floorClient{ctx: tctx, desc: "the appliance's own Chromium (DevToolsActivePort), own tab in its own browser context, 1280x720",
		close: func() {
			cancelT()
			dctx, cancel := context.WithTimeout(root, 5*time.Second)
			_, _ = chromedp.CallBrowser(dctx, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: bc.BrowserContextID})
			cancel()
			cancelRoot()
			cancelA()
		}}, nil
}

// floorOwnChromium is the fallback: a headless Chromium started like the
// bench's other baselines.
func floorOwnChromium() (*floorClient, error) {
	dir, err := os.MkdirTemp("", "tabcast-bench-floor-")
	if err != nil {
		return nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath("/usr/lib/chromium/chromium"), chromedp.Flag("headless", "new"),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.UserDataDir(dir), chromedp.WindowSize(1280, 720),
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	closeAll := func() { cancelB(); cancelA(); os.RemoveAll(dir) }
	if err := chromedp.Do(bctx); err != nil {
		closeAll()
		return nil, err
	}
	return &floorClient{ctx: bctx, desc: "a headless Chromium of its own (the appliance's was unreachable), 1280x720", close: closeAll}, nil
}

func (f *floorClient) navigate(ctx context.Context, url string) error {
	c, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	return chromedp.Do(c, chromedp.Navigate(url))
}

func evalShort[T any](ctx context.Context, expr string) (T, error) {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(c, chromedp.Evaluate[T](expr))
}

// backendNode resolves a selector once, outside the timings (the agent's
// ref was also taken outside them).
func (f *floorClient) backendNode(ctx context.Context, sel string) (cdp.BackendNodeID, error) {
	c, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	ev, err := chromedp.Call(c, cdpruntime.Evaluate, cdpruntime.EvaluateParams{Expression: "document.querySelector(" + strconv.Quote(sel) + ")"})
	if err != nil {
		return 0, err
	}
	if ev.ExceptionDetails != nil || ev.Result == nil || ev.Result.ObjectID == "" {
		return 0, fmt.Errorf("%s not found", sel)
	}
	d, err := chromedp.Call(c, dom.DescribeNode, dom.DescribeNodeParams{ObjectID: ev.Result.ObjectID})
	if err != nil {
		return 0, err
	}
	return d.Node.BackendNodeID, nil
}

func (f *floorClient) click(ctx context.Context, id cdp.BackendNodeID) error {
	c, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Call(c, dom.ScrollIntoViewIfNeeded, dom.ScrollIntoViewIfNeededParams{BackendNodeID: id}); err != nil {
		return err
	}
	bm, err := chromedp.Call(c, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: id})
	if err != nil {
		return err
	}
	q := bm.Model.Content
	if len(q) < 8 {
		return fmt.Errorf("bad box model")
	}
	x, y := (q[0]+q[2]+q[4]+q[6])/4, (q[1]+q[3]+q[5]+q[7])/4
	for _, p := range []input.DispatchMouseEventParams{
		{Type: input.DispatchMouseEventTypeMousePressed, X: x, Y: y, Button: input.MouseButtonLeft, Buttons: 1, ClickCount: 1},
		{Type: input.DispatchMouseEventTypeMouseReleased, X: x, Y: y, Button: input.MouseButtonLeft, ClickCount: 1},
	} {
		if _, err := chromedp.Call(c, input.DispatchMouseEvent, p); err != nil {
			return err
		}
	}
	return nil
}

// fill: focus the field (a click at its centre, as the agent's fill does,
// or DOM.focus), select all, then insert the text over the selection (or,
// for no text, delete it), as the agent's fill does.
func (f *floorClient) fill(ctx context.Context, id cdp.BackendNodeID, text string, domFocus bool) error {
	if !domFocus {
		if err := f.click(ctx, id); err != nil {
			return err
		}
	}
	c, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	if domFocus {
		if _, err := chromedp.Call(c, dom.Focus, dom.FocusParams{BackendNodeID: id}); err != nil {
			return err
		}
	}
	keys := []input.DispatchKeyEventParams{
		{Type: input.DispatchKeyEventTypeRawKeyDown, Modifiers: 2, Key: "a", Code: "KeyA", WindowsVirtualKeyCode: 65, NativeVirtualKeyCode: 65, Commands: []string{"selectAll"}},
		{Type: input.DispatchKeyEventTypeKeyUp, Modifiers: 2, Key: "a", Code: "KeyA", WindowsVirtualKeyCode: 65, NativeVirtualKeyCode: 65},
	}
	if text == "" {
		keys = append(keys,
			input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Key: "Backspace", Code: "Backspace", WindowsVirtualKeyCode: 8, NativeVirtualKeyCode: 8},
			input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: "Backspace", Code: "Backspace", WindowsVirtualKeyCode: 8, NativeVirtualKeyCode: 8})
	}
	for _, k := range keys {
		if _, err := chromedp.Call(c, input.DispatchKeyEvent, k); err != nil {
			return err
		}
	}
	if text == "" {
		return nil
	}
	_, err := chromedp.Call(c, input.InsertText, input.InsertTextParams{Text: text})
	return err
}

func (f *floorClient) axTree(ctx context.Context) (accessibility.GetFullAXTreeResult, error) {
	c, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Call(c, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
}

func printAgent(r *agentReport) {
	if r == nil {
		return
	}
	fmt.Printf("\nAgent API bench — %s, %d runs per step after %d warm-up (%s)\n", r.Machine, agentRuns, agentWarmup, r.When.Format(time.RFC3339))
	fmt.Printf("floor: plain chromedp on %s\n\n", r.Floor)
	fmt.Printf("  %-40s %20s %20s %10s %8s\n", "step", "tabcast p50/p95 ms", "floor p50/p95 ms", "p95 ratio", "target")
	for _, s := range r.Steps {
		verdict := "ok"
		switch {
		case s.Unjudged != "":
			verdict = "(" + s.Unjudged + ")"
		case s.RatioP95 > r.Target:
			verdict = "OVER"
		}
		fmt.Printf("  %-40s %20s %20s %9.2f× %5.1f× %s\n", s.Step,
			fmt.Sprintf("%.1f / %.1f", s.TabcastP50Ms, s.TabcastP95Ms), fmt.Sprintf("%.1f / %.1f", s.FloorP50Ms, s.FloorP95Ms), s.RatioP95, r.Target, verdict)
	}
	if len(r.Snapshots) > 0 {
		fmt.Printf("\n  snapshot of the large page (%d product rows), %d runs after 1 warm-up\n", r.LargeRows, agentSnaps)
		fmt.Printf("  %-26s %18s %9s %9s %7s %6s %18s %9s %13s %9s\n", "tabcast kind", "tabcast p50/p95 ms", "text KB", "body KB", "nodes", "trunc", "floor p50/p95 ms", "floor KB", "floor nodes", "p95 ratio")
		for _, s := range r.Snapshots {
			fmt.Printf("  %-26s %18s %9.1f %9.1f %7d %6v %18s %9.1f %13s %8.2f×\n", s.Kind,
				fmt.Sprintf("%.1f / %.1f", s.TabcastP50Ms, s.TabcastP95Ms), float64(s.TextBytes)/1024, float64(s.BodyBytes)/1024, s.Nodes, s.Truncated,
				fmt.Sprintf("%.1f / %.1f", s.FloorP50Ms, s.FloorP95Ms), float64(s.FloorBytes)/1024, fmt.Sprintf("%d (%d shown)", s.FloorNodes, s.FloorShown), s.RatioP95)
		}
	}
	fmt.Printf("\n  timed clicks answered before the counter changed: %d of %d\n", r.ClicksAckedEarly, agentRuns)
	for _, c := range r.Checks {
		fmt.Println("  check:", c)
	}
	fmt.Printf("  load average before / after: %s / %s; wall %.1f s\n\n", r.LoadBefore, r.LoadAfter, r.WallSeconds)
}
