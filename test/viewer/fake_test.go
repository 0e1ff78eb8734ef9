package viewer_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/ice/v4"
	"github.com/pion/turn/v4"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
)

// fakeAppliance speaks the appliance's side of the signaling protocol
// (hello → welcome → offer → answer, trickle both ways) and sends a VP8
// track of synthetic frames. Its host candidates are limited to ifaces.
type fakeAppliance struct {
	srv *httptest.Server
	URL string

	ifaces     []string
	welcomeICE []map[string]any // iceServers in the welcome; nil: none
}

func startFake(t *testing.T, ip string, ifaces []string, welcomeICE []map[string]any, tlsCert ...*httptestTLS) *fakeAppliance {
	t.Helper()
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAppliance{ifaces: ifaces, welcomeICE: welcomeICE}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve(t)))
	f.srv.Listener.Close()
	f.srv.Listener = ln
	if len(tlsCert) > 0 {
		f.srv.TLS = tlsCert[0].config
		f.srv.StartTLS()
	} else {
		f.srv.Start()
	}
	f.URL = f.srv.URL
	t.Cleanup(f.srv.Close)
	return f
}

type sigMsg struct {
	Type       string                   `json:"type"`
	SDP        string                   `json:"sdp,omitempty"`
	Codec      string                   `json:"codec,omitempty"`
	SessionID  string                   `json:"sessionId,omitempty"`
	PeerID     string                   `json:"peerId,omitempty"`
	ICEServers []map[string]any         `json:"iceServers,omitempty"`
	Candidate  *webrtc.ICECandidateInit `json:"candidate,omitempty"`
}

func (f *fakeAppliance) serve(t *testing.T) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/signal") {
			http.NotFound(w, r)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		var wmu sync.Mutex
		send := func(m sigMsg) {
			b, _ := json.Marshal(m)
			wmu.Lock()
			defer wmu.Unlock()
			_ = ws.Write(ctx, websocket.MessageText, b)
		}
		read := func() (sigMsg, error) {
			var m sigMsg
			_, b, err := ws.Read(ctx)
			if err == nil {
				err = json.Unmarshal(b, &m)
			}
			return m, err
		}
		if m, err := read(); err != nil || m.Type != "hello" {
			t.Errorf("fake: want hello, got %+v %v", m, err)
			return
		}
		send(sigMsg{Type: "welcome", SessionID: "s1", PeerID: "p1", Codec: "vp8", ICEServers: f.welcomeICE})

		me := &webrtc.MediaEngine{}
		if err := me.RegisterDefaultCodecs(); err != nil {
			t.Error(err)
			return
		}
		se := webrtc.SettingEngine{}
		se.SetIncludeLoopbackCandidate(true)
		se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
		allow := map[string]bool{}
		for _, n := range f.ifaces {
			allow[n] = true
		}
		se.SetInterfaceFilter(func(n string) bool { return allow[n] })
		pc, err := webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
		if err != nil {
			t.Error(err)
			return
		}
		defer pc.Close()
		track, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, "video", "tabcast")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := pc.AddTransceiverFromTrack(track, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Error(err)
			return
		}
		// No candidate before the offer (docs/protocol.md).
		var (
			cmu      sync.Mutex
			offered  bool
			buffered []webrtc.ICECandidateInit
		)
		pc.OnICECandidate(func(c *webrtc.ICECandidate) {
			if c == nil {
				return
			}
			ci := c.ToJSON()
			cmu.Lock()
			defer cmu.Unlock()
			if !offered {
				buffered = append(buffered, ci)
				return
			}
			send(sigMsg{Type: "candidate", Candidate: &ci})
		})
		offer, err := pc.CreateOffer(nil)
		if err == nil {
			err = pc.SetLocalDescription(offer)
		}
		if err != nil {
			t.Error(err)
			return
		}
		send(sigMsg{Type: "offer", SDP: offer.SDP})
		cmu.Lock()
		offered = true
		for _, ci := range buffered {
			send(sigMsg{Type: "candidate", Candidate: &ci})
		}
		cmu.Unlock()

		go func() { // ~30 fps, a keyframe every 30 frames
			tick := time.NewTicker(33 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				frame := make([]byte, 1200)
				frame[0] = 0x01 // interframe
				if i%30 == 0 {
					frame[0] = 0x10
				}
				_ = track.WriteSample(media.Sample{Data: frame, Duration: 33 * time.Millisecond})
			}
		}()
		for {
			m, err := read()
			if err != nil {
				return
			}
			switch m.Type {
			case "answer":
				if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: m.SDP}); err != nil {
					t.Errorf("fake: answer: %v", err)
					return
				}
			case "candidate":
				if m.Candidate != nil {
					_ = pc.AddICECandidate(*m.Candidate)
				}
			case "bye":
				return
			}
		}
	}
}

// turnServer is a TURN server accepting user u / password p over TCP on
// ip, relaying from ip.
type turnServer struct {
	URL      string // turn:ip:port?transport=tcp
	User     string
	Password string
}

func startTURN(t *testing.T, ip string) *turnServer {
	t.Helper()
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	const realm = "tabcast.test"
	s, err := turn.NewServer(turn.ServerConfig{
		Realm: realm,
		AuthHandler: func(username, realm string, _ net.Addr) ([]byte, bool) {
			if username != "u" {
				return nil, false
			}
			return turn.GenerateAuthKey("u", realm, "p"), true
		},
		ListenerConfigs: []turn.ListenerConfig{{
			Listener:              ln,
			RelayAddressGenerator: &turn.RelayAddressGeneratorStatic{RelayAddress: net.ParseIP(ip), Address: ip},
		}},
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &turnServer{URL: "turn:" + ln.Addr().String() + "?transport=tcp", User: "u", Password: "p"}
}
