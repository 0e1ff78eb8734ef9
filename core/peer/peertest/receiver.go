package peertest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/samplebuilder"
)

// Receiver is a viewer written with Pion: the answering side of a peer,
// that depacketizes the received video into frames and counts them.
type Receiver struct {
	PC *webrtc.PeerConnection

	mu        sync.Mutex
	frames    int
	keyframes int
	mime      string
	width     int
	height    int
	ssrc      webrtc.SSRC
	closed    bool
	gotTrack  chan struct{}
	trackOnce sync.Once
	readers   sync.WaitGroup
}

// NewReceiver builds a receiver that decodes codecs the same way a browser
// would offer them (codecs are the peer package's list). onCandidate gets
// every local candidate (trickle); interfaces restricts host candidates
// (nil = all).
func NewReceiver(codecList []webrtc.RTPCodecParameters, interfaces []string,
	onCandidate func(webrtc.ICECandidateInit),
) (*Receiver, error) {
	me := &webrtc.MediaEngine{}
	for _, c := range codecList {
		if err := me.RegisterCodec(c, webrtc.RTPCodecTypeVideo); err != nil {
			return nil, fmt.Errorf("register codec: %w", err)
		}
	}
	reg := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(me, reg); err != nil {
		return nil, fmt.Errorf("interceptors: %w", err)
	}
	se := webrtc.SettingEngine{}
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	if len(interfaces) > 0 {
		allow := map[string]bool{}
		for _, n := range interfaces {
			allow[n] = true
		}
		se.SetInterfaceFilter(func(n string) bool { return allow[n] })
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(reg),
		webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return nil, fmt.Errorf("receiver peer connection: %w", err)
	}
	r := &Receiver{PC: pc, gotTrack: make(chan struct{})}
	pc.OnICECandidate(func(c *webrtc.ICECandidate) {
		if c != nil && onCandidate != nil {
			onCandidate(c.ToJSON())
		}
	})
	pc.OnTrack(func(t *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		// Pion runs this on its own goroutine: register with the wait
		// group under the lock, unless Close has begun.
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return
		}
		r.readers.Add(1)
		r.mime = t.Codec().MimeType
		r.ssrc = t.SSRC()
		r.mu.Unlock()
		defer r.readers.Done()
		r.trackOnce.Do(func() { close(r.gotTrack) })
		r.read(t)
	})
	return r, nil
}

// Answer applies the offer and returns the answer (set as local
// description; candidates then trickle).
func (r *Receiver) Answer(offer string) (string, error) {
	if err := r.PC.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		return "", fmt.Errorf("set offer: %w", err)
	}
	ans, err := r.PC.CreateAnswer(nil)
	if err != nil {
		return "", fmt.Errorf("create answer: %w", err)
	}
	if err := r.PC.SetLocalDescription(ans); err != nil {
		return "", fmt.Errorf("set answer: %w", err)
	}
	return ans.SDP, nil
}

func (r *Receiver) read(t *webrtc.TrackRemote) {
	var dep rtp.Depacketizer
	isVP8 := strings.EqualFold(t.Codec().MimeType, webrtc.MimeTypeVP8)
	if isVP8 {
		dep = &codecs.VP8Packet{}
	} else {
		dep = &codecs.H264Packet{}
	}
	sb := samplebuilder.New(128, dep, t.Codec().ClockRate)
	for {
		pkt, _, err := t.ReadRTP()
		if err != nil {
			return // io.EOF or closed: the peer connection ended
		}
		sb.Push(pkt)
		for s := sb.Pop(); s != nil; s = sb.Pop() {
			r.count(s.Data, isVP8)
		}
	}
}

func (r *Receiver) count(data []byte, isVP8 bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames++
	if isVP8 {
		// A VP8 keyframe: 3-byte frame tag (bit 0 clear), start code
		// 9d 01 2a, then 14-bit width and height.
		if len(data) >= 10 && data[0]&1 == 0 && data[3] == 0x9d && data[4] == 0x01 && data[5] == 0x2a {
			r.keyframes++
			r.width = int(binary.LittleEndian.Uint16(data[6:8]) & 0x3fff)
			r.height = int(binary.LittleEndian.Uint16(data[8:10]) & 0x3fff)
		}
		return
	}
	for _, nal := range splitNALs(data) {
		if len(nal) > 0 && nal[0]&0x1f == 5 {
			r.keyframes++
			break
		}
	}
}

// splitNALs splits Annex-B data on 3- and 4-byte start codes.
func splitNALs(b []byte) [][]byte {
	var out [][]byte
	start := -1
	for i := 0; i+2 < len(b); i++ {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			if start >= 0 {
				end := i
				if end > start && b[end-1] == 0 {
					end--
				}
				out = append(out, b[start:end])
			}
			start = i + 3
			i += 2
		}
	}
	if start >= 0 && start <= len(b) {
		out = append(out, b[start:])
	}
	return out
}

// WaitTrack waits for the remote track.
func (r *Receiver) WaitTrack(d time.Duration) error {
	select {
	case <-r.gotTrack:
		return nil
	case <-time.After(d):
		return errors.New("no remote track")
	}
}

// Counts returns frames and keyframes depacketized so far.
func (r *Receiver) Counts() (frames, keyframes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frames, r.keyframes
}

// Info returns the track's MIME type and (VP8 only) keyframe dimensions.
func (r *Receiver) Info() (mime string, width, height int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mime, r.width, r.height
}

// WaitFrames polls until at least n frames arrived or d passes.
func (r *Receiver) WaitFrames(n int, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		f, _ := r.Counts()
		if f >= n {
			return f, nil
		}
		if time.Now().After(deadline) {
			return f, fmt.Errorf("got %d frames in %v, want %d", f, d, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SendPLI asks the sender for a keyframe, as a browser does after loss.
func (r *Receiver) SendPLI() error {
	r.mu.Lock()
	ssrc := r.ssrc
	r.mu.Unlock()
	if err := r.PC.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: uint32(ssrc)}}); err != nil {
		return fmt.Errorf("write pli: %w", err)
	}
	return nil
}

// Close closes the peer connection and waits for the track reader.
func (r *Receiver) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.PC.Close()
	r.readers.Wait()
	if err != nil {
		return fmt.Errorf("close receiver: %w", err)
	}
	return nil
}
