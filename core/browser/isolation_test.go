package browser

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// memKB sums the RSS and PSS (kB) of every process of the browser: RSS
// counts the pages its processes share once per process (the binary's
// text, above all), PSS splits them, so PSS is what the box really pays.
func (b *Browser) memKB() (rss, pss int) {
	for _, pid := range related(b.proc.pid, b.rootDir) {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			switch k {
			case "Rss":
				rss += n
			case "Pss":
				pss += n
			}
		}
		f.Close()
	}
	return rss, pss
}

// TestIsolationCost measures what browser.isolation per-session would cost
// against the shared browser: N sessions as N BrowserContexts of one
// Chromium, then as N Chromiums of one page each, with the start time of
// each session (launch included where it has one) and the memory of all
// the processes once they settled. It only measures (set
// TABCAST_MEASURE=1); it fails when a browser or a page does not start.
func TestIsolationCost(t *testing.T) {
	if os.Getenv("TABCAST_MEASURE") == "" {
		t.Skip("a measurement: TABCAST_MEASURE=1 go test -run TestIsolationCost -v ./core/browser/")
	}
	defer goleak.VerifyNone(t)
	const n = 4
	// A page like a session shows: some layout and an animation.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>iso</title><style>body{font:16px sans-serif}#b{width:120px;height:120px;background:#fc0;position:absolute}</style>
<body><h1>session</h1>`+strings.Repeat("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>", 50)+`<div id=b></div><script>
let i=0;(function f(){i++;document.getElementById('b').style.left=(i*5%900)+'px';requestAnimationFrame(f)})()</script>`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	settle := func() { time.Sleep(3 * time.Second) }

	// Shared: one launch, then a context and page per session.
	start := time.Now()
	shared := launch(t)
	launchTook := time.Since(start)
	var pageTook []time.Duration
	var rss1, pss1 int
	for i := range n {
		s := time.Now()
		if _, err := shared.NewPage(ctx, PageOptions{URL: srv.URL}); err != nil {
			t.Fatalf("shared page %d: %v", i, err)
		}
		pageTook = append(pageTook, time.Since(s))
		if i == 0 {
			settle()
			rss1, pss1 = shared.memKB()
		}
	}
	settle()
	rssN, pssN := shared.memKB()
	if err := shared.Close(); err != nil {
		t.Fatal(err)
	}

	// Per session: a Chromium each.
	var own []*Browser
	var ownTook []time.Duration
	for i := range n {
		s := time.Now()
		b := launch(t)
		own = append(own, b)
		if _, err := b.NewPage(ctx, PageOptions{URL: srv.URL}); err != nil {
			t.Fatalf("own browser page %d: %v", i, err)
		}
		ownTook = append(ownTook, time.Since(s))
	}
	settle()
	var rssOwn, pssOwn int
	for _, b := range own {
		r, p := b.memKB()
		rssOwn += r
		pssOwn += p
	}
	for _, b := range own {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}

	avg := func(d []time.Duration) time.Duration {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return (sum / time.Duration(len(d))).Round(time.Millisecond)
	}
	mb := func(kb int) string { return fmt.Sprintf("%.0f MB", float64(kb)/1024) }
	t.Logf("shared:      launch %v; session start (context + page) %v avg, %v", launchTook.Round(time.Millisecond), avg(pageTook), pageTook)
	t.Logf("per-session: session start (launch + page) %v avg, %v", avg(ownTook), ownTook)
	t.Logf("shared, 1 session: RSS %s PSS %s; %d sessions: RSS %s PSS %s; each further session: PSS +%s",
		mb(rss1), mb(pss1), n, mb(rssN), mb(pssN), mb((pssN-pss1)/(n-1)))
	// One session costs the same either way (one browser, one page): the
	// difference is in every further session.
	t.Logf("per-session, %d sessions: RSS %s PSS %s (x%.1f the shared total); each further session: PSS +%s (x%.1f)",
		n, mb(rssOwn), mb(pssOwn), float64(pssOwn)/float64(pssN), mb((pssOwn-pss1)/(n-1)), float64(pssOwn-pss1)/float64(pssN-pss1))
}
