// Package signaling serves the viewer's WebSocket signaling endpoint
// (/api/v1/sessions/{id}/signal): JSON text frames that set up one WebRTC
// peer per socket. The protocol is specified in docs/protocol.md,
// section "Signaling".
package signaling

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/pion/webrtc/v4"
	"github.com/tabcast/tabcast/core/errcode"
)

// Message types.
const (
	TypeHello     = "hello"
	TypeAnswer    = "answer"
	TypeCandidate = "candidate"
	TypeKeyframe  = "keyframe"
	TypePing      = "ping"
	TypeBye       = "bye"

	TypeWelcome  = "welcome"
	TypeOffer    = "offer"
	TypeState    = "state"
	TypePong     = "pong"
	TypeError    = "error"
	TypeSnapshot = "snapshot" // carries the session status (statusMsg); the name is the wire's
)

// Codec names on the wire.
const (
	CodecAuto = "auto"
	CodecH264 = "h264"
	CodecVP8  = "vp8"
)

// Size limits of client messages.
const (
	// MaxMessageSize bounds every client message except answer.
	MaxMessageSize = 64 << 10
	// MaxSDPSize bounds the SDP of an answer (after JSON unescaping).
	MaxSDPSize = 64 << 10
	// MaxAnswerMessageSize bounds an answer message: a 64 KiB SDP grows
	// when JSON-escaped ("\r\n" takes 4 bytes), so answers get room for it.
	MaxAnswerMessageSize = 256 << 10
	// ReadLimit is the WebSocket read limit; a bigger frame closes the
	// socket (status 1009). Everything between the limits above and this
	// one gets an error frame and the socket stays usable.
	ReadLimit = 1 << 20

	maxCodecs        = 16
	maxCodecName     = 32
	maxCandidateSize = 1024
	maxMidSize       = 64
)

// Protocol errors are *errcode.Error with one of the signaling codes
// (errcode.BadJSON … errcode.ShuttingDown, errcode.PermissionDenied); their
// messages never quote client input. An error frame carries the code and
// the message.

// Message is one decoded client message. Only the fields of its type are
// set.
type Message struct {
	Type string
	// hello
	Codec  string   // "auto", "h264" or "vp8"
	Codecs []string // lower-cased codec names the viewer decodes; nil if not sent
	// Interactive asks for input (DataChannels and a producer grant);
	// true when absent.
	Interactive bool
	// answer
	SDP string
	// candidate
	Candidate webrtc.ICECandidateInit
}

// Decode parses and validates one client message. Errors are *errcode.Error with
// one of the signaling codes.
func Decode(data []byte) (Message, error) {
	if len(data) > MaxAnswerMessageSize {
		// No message may be this large; do not spend time parsing it.
		return Message{}, errcode.Newf(errcode.TooLarge, "message over %d bytes", MaxAnswerMessageSize)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Message{}, errcode.Newf(errcode.BadJSON, "message is not a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		// The json error may quote input; say only that it did not parse.
		return Message{}, errcode.Newf(errcode.BadJSON, "message is not valid JSON")
	}
	rawType, ok := fields["type"]
	if !ok {
		return Message{}, errcode.Newf(errcode.BadField, "type is missing")
	}
	var typ string
	if err := json.Unmarshal(rawType, &typ); err != nil {
		return Message{}, errcode.Newf(errcode.BadField, "type is not a string")
	}
	m := Message{Type: typ}
	if typ != TypeAnswer && len(data) > MaxMessageSize {
		return Message{}, errcode.Newf(errcode.TooLarge, "message over %d bytes", MaxMessageSize)
	}
	switch typ {
	case TypeHello:
		return decodeHello(fields, m)
	case TypeAnswer:
		var sdp string
		if err := field(fields, "sdp", true, &sdp); err != nil {
			return Message{}, err
		}
		if len(sdp) > MaxSDPSize {
			return Message{}, errcode.Newf(errcode.SDPTooLarge, "sdp over %d bytes", MaxSDPSize)
		}
		if strings.TrimSpace(sdp) == "" {
			return Message{}, errcode.Newf(errcode.BadField, "sdp is empty")
		}
		m.SDP = sdp
		return m, nil
	case TypeCandidate:
		return decodeCandidate(fields, m)
	case TypeKeyframe, TypePing, TypeBye:
		return m, nil
	default:
		return Message{}, errcode.Newf(errcode.UnknownType, "unknown message type")
	}
}

// field decodes fields[name] into v; absent is an error when required,
// null counts as absent.
func field(fields map[string]json.RawMessage, name string, required bool, v any) error {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		if required {
			return errcode.Newf(errcode.BadField, "%s is missing", name)
		}
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errcode.Newf(errcode.BadField, "%s has the wrong type", name)
	}
	return nil
}

func decodeHello(fields map[string]json.RawMessage, m Message) (Message, error) {
	codec := CodecAuto
	if err := field(fields, "codec", false, &codec); err != nil {
		return Message{}, err
	}
	codec = strings.ToLower(codec)
	switch codec {
	case CodecAuto, CodecH264, CodecVP8:
	default:
		return Message{}, errcode.Newf(errcode.BadField, "codec must be auto, h264 or vp8")
	}
	m.Codec = codec
	m.Interactive = true
	if err := field(fields, "interactive", false, &m.Interactive); err != nil {
		return Message{}, err
	}
	if raw, ok := fields["codecs"]; ok && string(raw) != "null" {
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return Message{}, errcode.Newf(errcode.BadField, "codecs must be a list of strings")
		}
		if len(list) > maxCodecs {
			return Message{}, errcode.Newf(errcode.BadField, "codecs lists over %d entries", maxCodecs)
		}
		m.Codecs = make([]string, 0, len(list))
		for _, c := range list {
			if c == "" || len(c) > maxCodecName {
				return Message{}, errcode.Newf(errcode.BadField, "codecs entry empty or over %d bytes", maxCodecName)
			}
			m.Codecs = append(m.Codecs, strings.ToLower(c))
		}
	}
	return m, nil
}

func decodeCandidate(fields map[string]json.RawMessage, m Message) (Message, error) {
	var c struct {
		Candidate        *string `json:"candidate"`
		SDPMid           *string `json:"sdpMid"`
		SDPMLineIndex    *uint16 `json:"sdpMLineIndex"`
		UsernameFragment *string `json:"usernameFragment"`
	}
	raw, ok := fields["candidate"]
	if !ok || string(raw) == "null" {
		return Message{}, errcode.Newf(errcode.BadField, "candidate is missing")
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return Message{}, errcode.Newf(errcode.BadField, "candidate must be an object")
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return Message{}, errcode.Newf(errcode.BadField, "candidate has a field of the wrong type")
	}
	if c.Candidate == nil {
		return Message{}, errcode.Newf(errcode.BadField, "candidate.candidate is missing")
	}
	if len(*c.Candidate) > maxCandidateSize {
		return Message{}, errcode.Newf(errcode.BadField, "candidate.candidate over %d bytes", maxCandidateSize)
	}
	if c.SDPMid != nil && len(*c.SDPMid) > maxMidSize {
		return Message{}, errcode.Newf(errcode.BadField, "candidate.sdpMid over %d bytes", maxMidSize)
	}
	if c.UsernameFragment != nil && len(*c.UsernameFragment) > maxCandidateSize {
		return Message{}, errcode.Newf(errcode.BadField, "candidate.usernameFragment too long")
	}
	m.Candidate = webrtc.ICECandidateInit{
		Candidate: *c.Candidate, SDPMid: c.SDPMid, SDPMLineIndex: c.SDPMLineIndex,
		UsernameFragment: c.UsernameFragment,
	}
	return m, nil
}

// errorCode returns the code of a protocol error, or errcode.Internal.
func errorCode(err error) string {
	if c := errcode.CodeOf(err); c != "" {
		return c
	}
	return errcode.Internal
}

// Server messages.

// statusMsg carries the session's status (core/session.Status) under the
// wire type "snapshot", kept for compatibility (docs/protocol.md).
type statusMsg struct {
	Type     string `json:"type"`
	Revision uint64 `json:"revision"`
	Session  any    `json:"session"`
}

type welcomeMsg struct {
	Type      string `json:"type"`
	SessionID string `json:"sessionId"`
	PeerID    string `json:"peerId"`
	Codec     string `json:"codec"`
	// ConnectionGeneration is new for every peer.
	ConnectionGeneration uint64 `json:"connectionGeneration"`
	// Interactive: the peer has input DataChannels and a producer grant.
	Interactive bool `json:"interactive"`
	// The producer grant (interactive only).
	ProducerID         string `json:"producerId,omitempty"`
	ProducerGeneration uint64 `json:"producerGeneration,omitempty"`
	PageRevision       uint64 `json:"pageRevision"`
	// InputError says why an interactive hello got no producer.
	InputError string `json:"inputError,omitempty"`
	// ICEServers are TURN servers with short-lived credentials for this
	// peer; the viewer adds them to its RTCPeerConnection before answering.
	ICEServers []ICEServer `json:"iceServers,omitempty"`
	// ICETransportPolicy "relay" tells the viewer the appliance accepts
	// only relayed paths (it also enforces it).
	ICETransportPolicy string `json:"iceTransportPolicy,omitempty"`
}

// ICEServer is one entry of RTCConfiguration.iceServers. Credentials are
// never logged.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

type offerMsg struct {
	Type string `json:"type"`
	SDP  string `json:"sdp"`
	// An ICE restart's offer carries fresh relay credentials.
	ICEServers []ICEServer `json:"iceServers,omitempty"`
	Restart    bool        `json:"restart,omitempty"`
}

type candidateMsg struct {
	Type      string                  `json:"type"`
	Candidate webrtc.ICECandidateInit `json:"candidate"`
}

type stateMsg struct {
	Type  string `json:"type"`
	State string `json:"state"`
}

type simpleMsg struct {
	Type string `json:"type"`
}

type errorMsg struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}
