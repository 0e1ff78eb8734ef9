package media

import (
	"fmt"
	"strings"

	"github.com/pion/webrtc/v4"
)

// rtpClock is the 90 kHz video clock.
const rtpClock = 90000

// videoFeedback is what the viewer may send back for video: NACK for lost
// packets, PLI/FIR for keyframes, REMB/TWCC for bandwidth (Pion defaults).
var videoFeedback = []webrtc.RTCPFeedback{
	{Type: "goog-remb"}, {Type: "ccm", Parameter: "fir"},
	{Type: "nack"}, {Type: "nack", Parameter: "pli"}, {Type: "transport-cc"},
}

// Codecs are the video codecs every peer can send, in offer preference
// order within each MIME type; a pipeline's track uses the first entry of
// its codec. Exported so receivers in tests can mirror it.
var Codecs = []webrtc.RTPCodecParameters{
	{
		RTPCodecCapability: webrtc.RTPCodecCapability{
			MimeType: webrtc.MimeTypeH264, ClockRate: rtpClock,
			SDPFmtpLine:  "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
			RTCPFeedback: videoFeedback,
		},
		PayloadType: 106,
	},
	{
		RTPCodecCapability: webrtc.RTPCodecCapability{
			MimeType: webrtc.MimeTypeH264, ClockRate: rtpClock,
			SDPFmtpLine:  "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f",
			RTCPFeedback: videoFeedback,
		},
		PayloadType: 102,
	},
	{
		RTPCodecCapability: webrtc.RTPCodecCapability{
			MimeType: webrtc.MimeTypeVP8, ClockRate: rtpClock, RTCPFeedback: videoFeedback,
		},
		PayloadType: 96,
	},
}

// PlayoutDelayURI names the RTP header extension that carries a sender's
// playout delay bounds.
const PlayoutDelayURI = "http://www.webrtc.org/experiments/rtp-hdrext/playout-delay"

// NewMediaEngine returns a MediaEngine with Codecs registered for video.
func NewMediaEngine() (*webrtc.MediaEngine, error) {
	me := &webrtc.MediaEngine{}
	for _, c := range Codecs {
		if err := me.RegisterCodec(c, webrtc.RTPCodecTypeVideo); err != nil {
			return nil, fmt.Errorf("register codec %s: %w", c.MimeType, err)
		}
	}
	// Playout delay lets the appliance ask receivers to render every frame
	// at once (min = max = 0): a remote browser is interactive, and Chrome's
	// smoothing otherwise holds some frames for a few hundred ms.
	if err := me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: PlayoutDelayURI}, webrtc.RTPCodecTypeVideo); err != nil {
		return nil, fmt.Errorf("register playout-delay extension: %w", err)
	}
	return me, nil
}

// trackCapability is the capability of codec's shared track ("h264" or
// "vp8", anything else is VP8): the first entry of its MIME type in Codecs,
// without the feedback list, which the viewers' peers negotiate.
func trackCapability(codec string) webrtc.RTPCodecCapability {
	mime := webrtc.MimeTypeVP8
	if codec == "h264" {
		mime = webrtc.MimeTypeH264
	}
	for _, c := range Codecs {
		if strings.EqualFold(c.MimeType, mime) {
			capab := c.RTPCodecCapability
			capab.RTCPFeedback = nil
			return capab
		}
	}
	panic("media: no codec entry for " + mime)
}
