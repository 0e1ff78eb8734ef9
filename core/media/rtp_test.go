package media

import (
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
)

// TestTrackCapability: each codec's track is the first entry of its MIME
// type in the table the peers offer, so the viewers' negotiation matches.
func TestTrackCapability(t *testing.T) {
	for codec, want := range map[string]webrtc.RTPCodecCapability{
		"h264": {MimeType: webrtc.MimeTypeH264, ClockRate: rtpClock,
			SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"},
		"vp8": {MimeType: webrtc.MimeTypeVP8, ClockRate: rtpClock},
	} {
		got := trackCapability(codec)
		if got.MimeType != want.MimeType || got.ClockRate != want.ClockRate || got.SDPFmtpLine != want.SDPFmtpLine || got.RTCPFeedback != nil {
			t.Errorf("%s: %+v, want %+v", codec, got, want)
		}
	}
}

// TestRTPTimestamps: the RTP timestamp is the send time on the 90 kHz
// clock, and two samples in one tick still get distinct times.
func TestRTPTimestamps(t *testing.T) {
	w, err := newRTPWriter("vp8", "tabcast-test")
	if err != nil {
		t.Fatal(err)
	}
	at := w.start.Add(time.Second)
	if err := w.write([]byte{1}, at); err != nil {
		t.Fatal(err)
	}
	if w.lastTS != rtpClock {
		t.Fatalf("timestamp %d one second in, want %d", w.lastTS, rtpClock)
	}
	_ = w.write([]byte{2}, at)
	if w.lastTS != rtpClock+1 {
		t.Fatalf("second sample in the same tick: %d, want %d", w.lastTS, rtpClock+1)
	}
	_ = w.write([]byte{3}, at.Add(2*time.Second)) // a still page sent nothing for 2 s
	if w.lastTS != 3*rtpClock {
		t.Fatalf("after a pause: %d, want %d", w.lastTS, 3*rtpClock)
	}
}
