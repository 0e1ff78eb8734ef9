package peer

import (
	"sync/atomic"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// Pion's GetStats reports no outbound RTP stats, so the peer counts what
// it writes by wrapping the shared track: each binding's write stream goes
// through a counter (retransmissions by the NACK responder are not seen).
type sendCounters struct {
	packets atomic.Uint64
	bytes   atomic.Uint64 // payload bytes, as W3C bytesSent
}

type countingTrack struct {
	webrtc.TrackLocal
	c *sendCounters
}

func (t countingTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	return t.TrackLocal.Bind(countingContext{ctx, t.c})
}

func (t countingTrack) Unbind(ctx webrtc.TrackLocalContext) error {
	return t.TrackLocal.Unbind(countingContext{ctx, t.c})
}

type countingContext struct {
	webrtc.TrackLocalContext
	c *sendCounters
}

func (c countingContext) WriteStream() webrtc.TrackLocalWriter {
	return countingWriter{c.TrackLocalContext.WriteStream(), c.c}
}

type countingWriter struct {
	w webrtc.TrackLocalWriter
	c *sendCounters
}

func (w countingWriter) WriteRTP(h *rtp.Header, payload []byte) (int, error) {
	n, err := w.w.WriteRTP(h, payload)
	if err == nil {
		w.c.packets.Add(1)
		w.c.bytes.Add(uint64(len(payload)))
	}
	return n, err
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err == nil {
		var h rtp.Header
		if hn, herr := h.Unmarshal(b); herr == nil && hn <= len(b) {
			w.c.packets.Add(1)
			w.c.bytes.Add(uint64(len(b) - hn))
		}
	}
	return n, err
}
