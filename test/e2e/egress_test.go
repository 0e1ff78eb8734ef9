package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/rig"
)

// startInRig starts the appliance inside the rig's namespace with the
// intranet page (rig.LAN:80) and the loopback page allowed, as an IT
// department allowing one intranet site would.
func startInRig(t *testing.T, r *rig.Rig, sets ...string) (*harness.Appliance, harness.SessionSnapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	sets = append([]string{"server.tls=on", "input.allowLoopbackHosts=" + rig.LAN + ":80," + r.LoopbackPage}, sets...)
	a, err := harness.StartWith(ctx, dir, harness.Options{NetNS: r.NS.Name, Listen: r.AppAddr + ":0"}, sets...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("appliance log:\n%s", a.LogTail(6000))
		}
		_ = a.Stop(15 * time.Second)
	})
	s, err := a.DefaultSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return a, s
}

// settle gives what a page started time to reach the network.
func settle() { time.Sleep(1500 * time.Millisecond) }

func noDeniedHits(t *testing.T, r *rig.Rig, what string) {
	t.Helper()
	if h := r.DeniedHits(); len(h) > 0 {
		t.Errorf("%s reached a denied host:\n  %s", what, strings.Join(h, "\n  "))
	}
}

// The policy holds on the address Chromium connects to, for every kind of
// request, against DNS rebinding, popups and same-class neighbours
// (issue 16, items 1-3).
func TestEgressHoldsAgainstTheRig(t *testing.T) {
	r := rig.New(t)
	a, s := startInRig(t, r)
	lo := r.Loopback

	t.Run("rebinding through navigate", func(t *testing.T) {
		for _, u := range []string{
			// Two public answers: the navigate action's check and the
			// document request's interception each see a public address;
			// the lookup that connects (the egress proxy's) gets the
			// private one. (With a third public answer the proxy would
			// connect to the public host and nothing would be attacked:
			// navigation_blocked below proves the wall was hit.)
			"http://rb-lan2-p2-nav.evil.test/admin",
			"http://rb-meta-p2-nav.evil.test/latest/meta-data/iam/security-credentials/",
			"http://rb-lo-p2-nav.evil.test:" + strings.Split(lo, ":")[1] + "/",
		} {
			_, res := agentDo(t, a, s.ID, map[string]any{"command": "navigate", "url": u})
			name := strings.Split(strings.TrimPrefix(u, "http://"), "/")[0]
			if n := r.DNSAsked(strings.Split(name, ":")[0]); n < 3 {
				// The first answer (public) passed the navigate check; only
				// a second lookup meets the private answer. Fewer means the
				// test did not rebind anything.
				t.Errorf("%s: asked %d times; the rebinding was not exercised", name, n)
			}
			txt := mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "text", "selector": "body"})
			if strings.Contains(string(txt.Data), rig.MetadataSecret) || strings.Contains(string(txt.Data), "internal") {
				t.Errorf("%s: the page read back an internal host: %s", u, txt.Data)
			}
			t.Logf("%s: %d lookups, navigate error %+v", u, r.DNSAsked(strings.Split(name, ":")[0]), res.Error)
			// Only the egress proxy saw the private answer: the action
			// still says blocked, not success with a block page.
			if res.Error == nil || res.Error.Code != "navigation_blocked" {
				t.Errorf("%s: navigate answered %+v, want navigation_blocked", u, res.Error)
			}
		}
		// The same through the HTTP API's navigate.
		st, body, _ := call{method: "POST", path: "/api/v1/sessions/" + s.ID + "/navigate",
			body: `{"url":"http://rb-meta-p2-api.evil.test/latest/meta-data/"}`, token: a.Token}.do(t, a)
		if !strings.Contains(body, `"navigation_blocked"`) || strings.Contains(body, "meta-data") {
			t.Errorf("API navigate to a rebinding name: %d %s, want navigation_blocked without the URL", st, body)
		}
		noDeniedHits(t, r, "navigate to rebinding names")
	})

	t.Run("rebinding through the page's own location.href", func(t *testing.T) {
		// One public answer, for the document request's interception; the
		// proxy's lookup gets the metadata address and shows its block page
		// (which proves the wall, not the first check, stopped it).
		r.SetPage("/jump", `<html><body>jumping<script>setTimeout(()=>{location.href="http://rb-meta-p1-jump.evil.test/latest/meta-data/"},100)</script></body></html>`)
		mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://pub.evil.test/jump"})
		settle()
		t.Logf("rb-meta-p1-jump: %d lookups", r.DNSAsked("rb-meta-p1-jump.evil.test"))
		txt := mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "text", "selector": "body"})
		if !strings.Contains(string(txt.Data), "Blocked by the appliance") {
			t.Errorf("after location.href to a rebinding name the page shows %s, want the egress proxy's block page", txt.Data)
		}
		noDeniedHits(t, r, "location.href to a rebinding name")
	})

	t.Run("popups", func(t *testing.T) {
		r.SetPage("/popups", `<html><body style="margin:0">
<a id="b1" target="_blank" href="http://`+rig.LAN2+`/blank-link" style="display:block;height:60px">link</a>
<button id="b2" style="display:block;height:60px" onclick="window.open('http://`+rig.Metadata+`/latest/meta-data/')">open</button>
<form method="post" target="_blank" action="http://`+rig.LAN2+`/form"><input name="secret" value="posted-body"><button id="b3" style="height:60px">post</button></form>
<a id="b4" target="_blank" href="http://pub.evil.test/redirect?to=http://`+rig.LAN2+`/redirected" style="display:block;height:60px">redirect</a>
</body></html>`)
		for _, id := range []string{"#b1", "#b2", "#b3", "#b4"} {
			mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://pub.evil.test/popups"})
			mustAgent(t, a, s.ID, map[string]any{"command": "click", "selector": id})
			settle()
		}
		noDeniedHits(t, r, "popups")
	})

	// An allowed page attacking a neighbour of its own address class
	// (Chromium's Local Network Access does not stop these).
	attack := func(target string) string {
		return fmt.Sprintf(`<html><body>page
<img src="http://%[1]s/img"><script src="http://%[1]s/script.js"></script>
<link rel="stylesheet" href="http://%[1]s/css"><link rel="prefetch" href="http://%[1]s/prefetch">
<iframe src="http://%[1]s/iframe"></iframe><object data="http://%[1]s/object"></object>
<script>
fetch("http://%[1]s/fetch-cors").catch(()=>{});
fetch("http://%[1]s/fetch-nocors",{mode:"no-cors"}).catch(()=>{});
fetch("http://%[1]s/fetch-post",{method:"POST",mode:"no-cors",body:"posted"}).catch(()=>{});
try{navigator.sendBeacon("http://%[1]s/beacon","b")}catch(e){}
try{new WebSocket("ws://%[1]s/ws")}catch(e){}
try{new EventSource("http://%[1]s/sse")}catch(e){}
try{const x=new XMLHttpRequest();x.open("GET","http://%[1]s/xhr");x.send()}catch(e){}
try{new Worker(URL.createObjectURL(new Blob(['fetch("http://%[1]s/worker").catch(()=>{})'])))}catch(e){}
</script></body></html>`, target)
	}
	t.Run("an allowed intranet page against another intranet host", func(t *testing.T) {
		r.SetHostPage("lan", "/attack", attack(rig.LAN2))
		mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://" + rig.LAN + "/attack"})
		settle()
		if len(r.Hits("lan")) == 0 {
			t.Fatal("the allowed intranet page was never loaded: the test proves nothing")
		}
		noDeniedHits(t, r, "an intranet page's subresources")
	})
	t.Run("an allowed loopback page against a loopback service", func(t *testing.T) {
		r.SetHostPage("loopbackPage", "/attack", attack(lo))
		mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://" + r.LoopbackPage + "/attack"})
		settle()
		if len(r.Hits("loopbackPage")) == 0 {
			t.Fatal("the allowed loopback page was never loaded: the test proves nothing")
		}
		noDeniedHits(t, r, "a loopback page's subresources")
	})
	// The same page on the allowed host itself does reach it: the rig and
	// the proxy do carry traffic (so the empty logs above mean something).
	t.Run("control: allowed subresources arrive", func(t *testing.T) {
		before := len(r.Hits("lan"))
		r.SetHostPage("lan", "/self", attack(rig.LAN))
		mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://" + rig.LAN + "/self"})
		settle()
		var kinds []string
		for _, h := range r.Hits("lan")[before:] {
			for _, k := range []string{"/img", "/script.js", "/fetch-post", "/beacon", "/ws", "/worker"} {
				if strings.Contains(h, " "+k+" ") {
					kinds = append(kinds, k)
				}
			}
		}
		if len(kinds) < 5 {
			t.Errorf("an allowed page's own subresources: only %v arrived", kinds)
		}
	})
	// A page's own WebRTC: STUN/TURN servers and remote candidates at
	// internal addresses. Only UDP listeners of the rig count here.
	t.Run("a page's RTCPeerConnection", func(t *testing.T) {
		r.SetPage("/webrtc", `<html><body><pre id="out">starting</pre><script>
(async () => {
  const out = document.getElementById("out");
  try {
    const pc = new RTCPeerConnection({iceServers: [{urls: "stun:`+rig.Metadata+`:3478"}, {urls: "turn:`+rig.LAN2+`:3478?transport=udp", username: "u", credential: "p"}]});
    pc.createDataChannel("x");
    pc.onicecandidate = e => { if (e.candidate) out.textContent += "\ncandidate " + e.candidate.type; };
    const o = await pc.createOffer();
    await pc.setLocalDescription(o);
    let a = o.sdp.replace("a=setup:actpass", "a=setup:active")
      .replace(/a=ice-ufrag:.*\r\n/, "a=ice-ufrag:abcd\r\n").replace(/a=ice-pwd:.*\r\n/, "a=ice-pwd:abcdefghijklmnopqrstuvwx\r\n");
    a += "a=candidate:1 1 udp 2122260223 `+rig.LAN+` 3478 typ host\r\na=candidate:2 1 udp 2122260223 127.0.0.1 3478 typ host\r\na=candidate:3 1 udp 2122260223 `+rig.Metadata+` 3478 typ host\r\n";
    await pc.setRemoteDescription({type: "answer", sdp: a});
    out.textContent += "\nremote set";
  } catch (e) { out.textContent += "\nerror " + e; }
})();
</script></body></html>`)
		mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://pub.evil.test/webrtc"})
		time.Sleep(4 * time.Second) // connectivity checks go out within the first second
		txt := mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "text", "selector": "#out"})
		t.Logf("the page's peer connection: %s", txt.Data)
		if !strings.Contains(string(txt.Data), "remote set") {
			t.Errorf("the page's peer connection never took the remote answer (the test proves nothing): %s", txt.Data)
		}
		noDeniedHits(t, r, "a page's WebRTC")
	})

	st := metricValue(t, a, "tabcast_egress_refused_total")
	if st < 10 {
		t.Errorf("tabcast_egress_refused_total = %v after the attacks", st)
	}
	t.Logf("egress refusals counted: %v", st)
}

// A company proxy upstream sees the session's requests, by address, and
// the policy still decides first (issue 16, item 2).
func TestEgressThroughUpstreamProxy(t *testing.T) {
	r := rig.New(t)
	a, s := startInRig(t, r, "sessions.proxy=http://"+rig.Upstream+":3128")
	r.SetPage("/via", `<html><body>through the proxy</body></html>`)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upstream: %q\npublic: %q", r.Hits("upstream"), r.Hits("public"))
		}
	})
	mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://pub.evil.test/via"})
	txt := mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "text", "selector": "body"})
	if !strings.Contains(string(txt.Data), "through the proxy") {
		t.Errorf("the page did not load through the upstream: %s", txt.Data)
	}
	_, _ = agentDo(t, a, s.ID, map[string]any{"command": "navigate", "url": "http://rb-lan2-up.evil.test/"})
	settle()
	connects := r.Connects()
	var sawPublic bool
	for _, c := range connects {
		if c == "CONNECT "+rig.Public+":80" {
			sawPublic = true
		}
		if strings.Contains(c, rig.LAN2) || strings.Contains(c, "evil.test") {
			t.Errorf("the upstream was asked %q: a name, or a denied address", c)
		}
	}
	if !sawPublic {
		t.Errorf("the upstream never saw the session's request: %q", connects)
	}
	noDeniedHits(t, r, "through the upstream")
}

// metricValue reads one unlabelled sample from /metrics.
func metricValue(t *testing.T, a *harness.Appliance, name string) float64 {
	t.Helper()
	st, body, _ := call{method: "GET", path: "/metrics", token: a.Token}.do(t, a)
	if st != 200 {
		t.Fatalf("/metrics: %d", st)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("/metrics lacks %s", name)
	return 0
}

// A session's own proxy: one the policy refuses (an intranet address) is
// refused with bad_proxy and nothing is created; one it allows carries
// the session's requests by address (issue 16, item 2).
func TestEgressSessionProxy(t *testing.T) {
	r := rig.New(t)
	a, _ := startInRig(t, r)
	st, body, _ := call{method: "POST", path: "/api/v1/sessions", token: a.Token,
		body: `{"proxy":"http://u:pw-secret@` + rig.LAN2 + `:3128"}`}.do(t, a)
	if st != 422 || !strings.Contains(body, `"bad_proxy"`) || strings.Contains(body, "pw-secret") || strings.Contains(body, rig.LAN2) {
		t.Errorf("a session proxy on the LAN: %d %s, want 422 bad_proxy naming neither credentials nor address", st, body)
	}
	st, body, _ = call{method: "POST", path: "/api/v1/sessions", token: a.Token, body: `{"proxy":"ftp://` + rig.Public + `:3128"}`}.do(t, a)
	if st != 422 || !strings.Contains(body, `"bad_proxy"`) {
		t.Errorf("an ftp proxy: %d %s", st, body)
	}
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if err := a.Do(context.Background(), "POST", "/api/v1/sessions", `{"proxy":"http://`+rig.Public+`:3128"}`, &created); err != nil {
		t.Fatal(err)
	}
	r.SetPage("/own", `<html><body>own proxy</body></html>`)
	mustAgent(t, a, created.Session.ID, map[string]any{"command": "navigate", "url": "http://pub.evil.test/own"})
	if c := r.Connects(); len(c) == 0 || c[len(c)-1] != "CONNECT "+rig.Public+":80" {
		t.Errorf("the session's own proxy was asked %q", c)
	}
	if logs := a.LogTail(200000); strings.Contains(logs, "pw-secret") {
		t.Error("the proxy's password reached the log")
	}
}
