package signaling_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/peer/peertest"
	"github.com/tabcast/tabcast/core/signaling"
)

var bothCodecs = []string{"h264", "vp8"}

// TestVideoEndToEnd: real encoded video from a session's track reaches a
// Pion viewer through the signaling handler, for both codecs; PLI and the
// keyframe message reach RequestKeyframe; closing the socket releases the
// subscription; nothing leaks after Handler.Close.
func TestVideoEndToEnd(t *testing.T) {
	for _, codec := range bothCodecs {
		t.Run(codec, func(t *testing.T) {
			e := newEnv(t)
			v, welcome := connectViewer(t, e.wsURL("s1"),
				map[string]any{"type": "hello", "codec": codec, "codecs": bothCodecs})
			if welcome.Codec != codec || welcome.SessionID != "s1" || welcome.PeerID == "" {
				t.Fatalf("welcome %+v", welcome)
			}
			if err := v.recv.WaitTrack(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			deadline := start.Add(8 * time.Second) // liveness, with room for a loaded CI machine
			for {
				v.pump(100 * time.Millisecond)
				if n, _ := v.recv.Counts(); n >= 15 {
					break
				}
				if time.Now().After(deadline) {
					n, k := v.recv.Counts()
					t.Fatalf("%d frames (%d keyframes) in 8 s, want >= 15", n, k)
				}
			}
			frames, keys := v.recv.Counts()
			mime, w, h := v.recv.Info()
			t.Logf("%s: %d frames, %d keyframes in %v; keyframe size %dx%d", mime, frames, keys,
				time.Since(start).Round(time.Millisecond), w, h)
			if !strings.EqualFold(mime, "video/"+codec) {
				t.Fatalf("track is %s, want %s", mime, codec)
			}
			if keys == 0 {
				t.Fatal("no keyframe received")
			}
			// The connection is counted with its candidate type (a direct
			// path on lo) and its time to connect.
			fams, err := e.opts.Telemetry.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			counted := map[string]float64{}
			for _, f := range fams {
				for _, m := range f.GetMetric() {
					k := f.GetName()
					for _, lp := range m.GetLabel() {
						k += " " + lp.GetName() + "=" + lp.GetValue()
					}
					counted[k] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
				}
			}
			if counted["tabcast_peer_connect_total candidate_type=host result=ok"]+counted["tabcast_peer_connect_total candidate_type=prflx result=ok"] != 1 ||
				counted["tabcast_peer_connect_seconds candidate_type=host"]+counted["tabcast_peer_connect_seconds candidate_type=prflx"] != 1 {
				t.Errorf("peer connection not counted: %v", counted)
			}
			if codec == "vp8" && (w != peertest.Width || h != peertest.Height) {
				t.Fatalf("VP8 keyframe %dx%d, want %dx%d", w, h, peertest.Width, peertest.Height)
			}

			// A PLI from the viewer's RTCP reaches RequestKeyframe.
			before := e.media.keyReqs.Load()
			if err := v.recv.SendPLI(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 3*time.Second, "keyframe request from PLI", func() bool { return e.media.keyReqs.Load() > before })
			// So does the keyframe message.
			before = e.media.keyReqs.Load()
			v.send(map[string]string{"type": "keyframe"})
			waitFor(t, 3*time.Second, "keyframe request from message", func() bool { return e.media.keyReqs.Load() > before })

			// Closing the socket closes the peer and releases the subscription.
			if e.media.subs.Load() != 1 || e.media.releases.Load() != 0 {
				t.Fatalf("subs %d releases %d", e.media.subs.Load(), e.media.releases.Load())
			}
			v.send(map[string]string{"type": "bye"})
			if st := v.waitClosed(5 * time.Second); st != websocket.StatusNormalClosure {
				t.Fatalf("close status %v", st)
			}
			waitFor(t, 5*time.Second, "release", func() bool { return e.media.releases.Load() == 1 })

			_ = v.recv.Close()
			e.close()
			goleak.VerifyNone(t)
		})
	}
}

func TestCodecChoice(t *testing.T) {
	e := newEnv(t)
	_, w := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "auto", "codecs": bothCodecs})
	if w.Codec != "h264" {
		t.Fatalf("auto with both: %s", w.Codec)
	}
	_, w = connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello", "codecs": []string{"VP8", "av1"}})
	if w.Codec != "vp8" {
		t.Fatalf("auto for a vp8-only viewer: %s", w.Codec)
	}

	vp8only := newEnv(t, "vp8")
	c := dial(t, vp8only.wsURL("s1"))
	c.send(map[string]any{"type": "hello", "codec": "h264", "codecs": bothCodecs})
	c.expectError(errcode.CodecUnsupported)
	c.expectPong()
	c.send(map[string]any{"type": "hello", "codec": "auto", "codecs": bothCodecs})
	if f := c.next("welcome", 5*time.Second, nil); f.Codec != "vp8" {
		t.Fatalf("auto on a vp8-only session: %s", f.Codec)
	}
	c.next("offer", 5*time.Second, nil)
}

// TestMalformedMessages: every bad message gets an error frame with its
// code and the socket keeps working.
func TestMalformedMessages(t *testing.T) {
	e := newEnv(t)
	c := dial(t, e.wsURL("s1"))
	bad := []struct {
		msg  string
		code string
	}{
		{`this is not json`, errcode.BadJSON},
		{`{"type":"hello"`, errcode.BadJSON},
		{`{"type":7}`, errcode.BadField},
		{`{"sdp":"x"}`, errcode.BadField},
		{`{"type":"launch-missiles"}`, errcode.UnknownType},
		{`{"type":"hello","codec":"h265"}`, errcode.BadField},
		{`{"type":"hello","codecs":{"h264":true}}`, errcode.BadField},
		{`{"type":"answer","sdp":"v=0"}`, errcode.BadState},
		{`{"type":"candidate","candidate":{"candidate":"candidate:1 1 udp 1 127.0.0.1 9 typ host"}}`, errcode.BadState},
		{`{"type":"keyframe"}`, errcode.BadState},
		{`{"type":"candidate","candidate":"nope"}`, errcode.BadField},
		{`{"type":"ping","pad":"` + strings.Repeat("x", 70<<10) + `"}`, errcode.TooLarge},
		{`{"type":"answer","sdp":"` + strings.Repeat("a", 65<<10) + `"}`, errcode.SDPTooLarge},
		{`{"type":"answer","sdp":"` + strings.Repeat("a", 300<<10) + `"}`, errcode.TooLarge},
	}
	for _, b := range bad {
		c.sendRaw([]byte(b.msg))
		f := c.expectError(b.code)
		if strings.Contains(f.Message, "missiles") || strings.Contains(f.Message, "aaaa") {
			t.Fatalf("error message quotes input: %q", f.Message)
		}
		c.expectPong()
	}
	// Binary frames are refused the same way.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageBinary, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	c.expectError(errcode.BadJSON)
	c.expectPong()

	// After hello: a second hello, a bad SDP.
	c.send(map[string]any{"type": "hello", "codec": "vp8"})
	c.next("welcome", 5*time.Second, nil)
	c.next("offer", 5*time.Second, nil)
	c.send(map[string]any{"type": "hello", "codec": "vp8"})
	c.expectError(errcode.BadState)
	c.send(map[string]any{"type": "answer", "sdp": "not an sdp at all"})
	c.expectError(errcode.BadField)
	c.expectPong()

	// Over the 1 MiB read limit the socket is closed (1009).
	// The server may reset the TCP connection while our write is still
	// going, so a write error and a reset instead of the 1009 frame are
	// both fine; the socket must end either way.
	big := []byte(`{"type":"ping","pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	_ = c.ws.Write(ctx, websocket.MessageText, big)
	if st := c.waitClosed(5 * time.Second); st != websocket.StatusMessageTooBig && st != -1 {
		t.Fatalf("close status %v, want 1009", st)
	}
	waitFor(t, 5*time.Second, "release", func() bool { return e.media.releases.Load() == 1 })
}

func TestTooManyCandidates(t *testing.T) {
	e := newEnv(t)
	c := dial(t, e.wsURL("s1"))
	c.send(map[string]any{"type": "hello", "codec": "vp8"})
	c.next("welcome", 5*time.Second, nil)
	offer := c.next("offer", 5*time.Second, nil)
	// An answer from a receiver whose candidates are not sent: only ours count.
	v := &rtcViewer{client: c}
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	v.recv = recv
	answer, err := recv.Answer(offer.SDP)
	if err != nil {
		t.Fatal(err)
	}
	c.send(map[string]any{"type": "answer", "sdp": answer})
	for i := 0; i < 50; i++ {
		cand := fmt.Sprintf("candidate:%d 1 udp 2130706431 127.0.0.1 %d typ host", i+1, 41000+i)
		c.send(map[string]any{"type": "candidate", "candidate": map[string]any{"candidate": cand, "sdpMid": "0", "sdpMLineIndex": 0}})
	}
	c.send(map[string]any{"type": "candidate", "candidate": map[string]any{
		"candidate": "candidate:99 1 udp 2130706431 127.0.0.1 42000 typ host", "sdpMid": "0", "sdpMLineIndex": 0,
	}})
	c.expectError(errcode.TooManyCandidates)
	c.expectPong()
}

// TestCandidatesBeforeTheAnswerAreKept: a viewer may trickle a candidate
// before its answer is on the wire (its gathering runs beside its
// signaling, notably after an ICE restart). Such candidates are kept and
// applied with the answer, not refused; they are bounded like the others.
func TestCandidatesBeforeTheAnswerAreKept(t *testing.T) {
	e := newEnv(t)
	c := dial(t, e.wsURL("s1"))
	c.send(map[string]any{"type": "hello", "codec": "vp8"})
	c.next("welcome", 5*time.Second, nil)
	offer := c.next("offer", 5*time.Second, nil)
	early := func(i int) {
		cand := fmt.Sprintf("candidate:%d 1 udp 2130706431 127.0.0.1 %d typ host", i+1, 41000+i)
		c.send(map[string]any{"type": "candidate", "candidate": map[string]any{"candidate": cand, "sdpMid": "0", "sdpMLineIndex": 0}})
	}
	for i := 0; i < 3; i++ {
		early(i)
	}
	c.expectPong() // no error for them
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	answer, err := recv.Answer(offer.SDP)
	if err != nil {
		t.Fatal(err)
	}
	c.send(map[string]any{"type": "answer", "sdp": answer})
	c.expectPong() // the kept ones applied without an error
	// They count against the peer's bound: 3 + 47 more fill it, the next
	// is refused.
	for i := 3; i < 50; i++ {
		early(i)
	}
	early(50)
	c.expectError(errcode.TooManyCandidates)

	// Before the answer the bound holds too.
	c2 := dial(t, e.wsURL("s1"))
	c2.send(map[string]any{"type": "hello", "codec": "vp8"})
	c2.next("welcome", 5*time.Second, nil)
	c2.next("offer", 5*time.Second, nil)
	for i := 0; i < 50; i++ {
		cand := fmt.Sprintf("candidate:%d 1 udp 2130706431 127.0.0.1 %d typ host", i+1, 41000+i)
		c2.send(map[string]any{"type": "candidate", "candidate": map[string]any{"candidate": cand, "sdpMid": "0", "sdpMLineIndex": 0}})
	}
	c2.send(map[string]any{"type": "candidate", "candidate": map[string]any{"candidate": "candidate:99 1 udp 1 127.0.0.1 9 typ host", "sdpMid": "0", "sdpMLineIndex": 0}})
	c2.expectError(errcode.TooManyCandidates)
	c2.expectPong()
}

func TestUnknownSession(t *testing.T) {
	e := newEnv(t, "vp8")
	c := dial(t, e.wsURL("nope"))
	c.expectError(errcode.SessionNotFound)
	if st := c.waitClosed(5 * time.Second); st != signaling.CloseSessionNotFound {
		t.Fatalf("close status %v", st)
	}
}

// TestSessionEnded: when the session ends its viewers are told and
// disconnected, instead of watching a frozen picture.
func TestSessionEnded(t *testing.T) {
	e := newEnv(t, "vp8")
	v, _ := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "vp8", "codecs": []string{"vp8"}})
	e.media.end()
	v.expectError(errcode.SessionEnded)
	if st := v.waitClosed(5 * time.Second); st != websocket.StatusNormalClosure {
		t.Fatalf("close status %v", st)
	}
}

func TestCapacityExceeded(t *testing.T) {
	e := newEnv(t, "vp8")
	e.media.full.Store(true)
	c := dial(t, e.wsURL("s1"))
	c.send(map[string]any{"type": "hello"})
	c.expectError(errcode.CapacityExceeded)
	c.expectPong()
}

// TestPeerEndClosesSocket: when the viewer's peer goes away (DTLS close),
// the server reports the state, closes the socket and releases the track.
func TestPeerEndClosesSocket(t *testing.T) {
	e := newEnv(t, "vp8")
	v, _ := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello"})
	_ = v.recv.Close()
	var last string
	timeout := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case f, ok := <-v.frames:
			open = ok
			if ok && f.Type == "state" {
				last = f.State
			}
		case <-timeout:
			t.Fatal("socket still open after the peer ended")
		}
	}
	if last != "closed" && last != "failed" {
		t.Fatalf("last state %q", last)
	}
	if st := websocket.CloseStatus(v.closeErr); st != websocket.StatusNormalClosure {
		t.Fatalf("close status %v", st)
	}
	waitFor(t, 5*time.Second, "release", func() bool { return e.media.releases.Load() == 1 })
}

// TestHandlerCloseEndsSockets: Close says 1001 to every open socket.
func TestHandlerCloseEndsSockets(t *testing.T) {
	e := newEnv(t, "vp8")
	v, _ := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello"})
	idle := dial(t, e.wsURL("s1"))
	idle.expectPong()
	e.handler.Close()
	if st := v.waitClosed(10 * time.Second); st != websocket.StatusGoingAway {
		t.Fatalf("viewer close status %v", st)
	}
	if st := idle.waitClosed(10 * time.Second); st != websocket.StatusGoingAway {
		t.Fatalf("idle close status %v", st)
	}
	if e.media.releases.Load() != 1 {
		t.Fatalf("releases %d", e.media.releases.Load())
	}
}

// TestKeepalive: a client that answers pings stays; one that does not read
// (so never answers a ping) is dropped.
func TestKeepalive(t *testing.T) {
	e := newEnv(t, "vp8")
	e.opts.PingInterval = 100 * time.Millisecond
	e.restartHandler()
	live := dial(t, e.wsURL("s1")) // its reader goroutine answers pings
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mute, _, err := websocket.Dial(ctx, e.wsURL("s1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mute.CloseNow()
	time.Sleep(time.Second)
	live.expectPong()
	// Now read: the server must have dropped the socket already, so this
	// ends with a connection error, not with the deadline.
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer rcancel()
	_, _, err = mute.Read(rctx)
	if err == nil || rctx.Err() != nil {
		t.Fatalf("mute socket still open: %v", err)
	}
}
