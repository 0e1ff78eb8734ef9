// Package wire is the DataChannel envelope codec of an interactive viewer
// peer (docs/protocol.md, "DataChannels"). Every message on the control,
// pointer and state channels, in both directions, is one binary
// DataChannel message: a version byte (Version) followed by a UTF-8 JSON
// object. Decode parses and checks what a viewer sends; EncodeAck and
// EncodeState build what the appliance answers. The messages are
// core/action's Envelope and Ack, the same values core/dispatch takes and
// gives: nothing converts between the codec and the dispatcher.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// Version is the first byte of every DataChannel message.
const Version byte = 1

// Channel labels.
const (
	ChannelControl = "control" // ordered, reliable: control actions up, acks down
	ChannelPointer = "pointer" // unordered, maxRetransmits 0: pointer_move and wheel up
	ChannelState   = "state"   // ordered: state events down only
)

// Size limits of one viewer message, version byte included.
const (
	// MaxControlSize leaves room for a 1 MiB clipboard_write or
	// text_insert plus its envelope.
	MaxControlSize = 1<<20 + (1<<20)/10
	// MaxPointerSize bounds a move or wheel; real ones are ~250 bytes.
	MaxPointerSize = 1 << 10
	// MaxActionIDLen bounds actionId (bytes); the dispatcher has the same bound.
	MaxActionIDLen = 128
	// MaxIDLen bounds browserSessionId, peerId and producerId (bytes).
	MaxIDLen = 128
)

// Refused messages are *errcode.Error with one of the DataChannel codes
// (errcode.BadVersion … errcode.ViewOnly): they travel in rejected acks and
// state "error" messages, and clients switch on them. Messages are safe to
// show and log: they never quote the client's input.

// CodeOf returns the code of the *errcode.Error in err's chain, or
// bad_envelope for any other error.
func CodeOf(err error) string {
	if c := errcode.CodeOf(err); c != "" {
		return c
	}
	return errcode.BadEnvelope
}

// Reject builds the rejected ack for a refused envelope: err's code and
// safe message, and whatever actionId could be read.
func Reject(actionID string, err error, pageRevision uint64) action.Ack {
	msg := "refused"
	if e, ok := errcode.As(err); ok {
		msg = e.Message
	}
	return action.Ack{ActionID: actionID, Status: action.StatusRejected, Code: CodeOf(err), Message: msg, PageRevision: pageRevision}
}

// Server message types.
const (
	TypeAck          = "ack"           // control
	TypePageState    = "page_state"    // state
	TypeDialogOpened = "dialog_opened" // state
	TypeDialogClosed = "dialog_closed" // state
	TypeProducer     = "producer"      // state
	TypeError        = "error"         // state
)

// clientKinds are the action kinds a viewer may send; release_all is only
// ever synthesized by the appliance.
var clientKinds = map[action.Kind]bool{
	action.PointerMove: true, action.Wheel: true,
	action.PointerDown: true, action.PointerUp: true, action.KeyDown: true, action.KeyUp: true,
	action.TextInsert: true, action.Navigate: true, action.Back: true, action.Forward: true,
	action.Reload: true, action.Stop: true, action.Viewport: true, action.ClipboardWrite: true,
	action.ClipboardRead: true, action.DialogResponse: true, action.Heartbeat: true,
}

// rawEnvelope tells absent fields from zero ones.
type rawEnvelope struct {
	BrowserSessionID     *string        `json:"browserSessionId"`
	PeerID               *string        `json:"peerId"`
	ConnectionGeneration *uint64        `json:"connectionGeneration"`
	ProducerID           *string        `json:"producerId"`
	ProducerGeneration   *uint64        `json:"producerGeneration"`
	PageRevision         *uint64        `json:"pageRevision"`
	ControlSeq           *uint64        `json:"controlSeq"`
	PointerSeq           *uint64        `json:"pointerSeq"`
	ActionID             *string        `json:"actionId"`
	Action               *action.Action `json:"action"`
}

// Decode parses and checks one viewer message received on channel. Errors
// are *errcode.Error with a DataChannel code. On error the returned Envelope holds
// the actionId when it could be read (so the rejection can name it) and
// nothing else. Field values (coordinates, key names, sizes of text) are
// the dispatcher's to validate; Decode checks structure, types, presence,
// the channel and the size.
func Decode(channel string, b []byte) (action.Envelope, error) {
	var limit int
	switch channel {
	case ChannelControl:
		limit = MaxControlSize
	case ChannelPointer:
		limit = MaxPointerSize
	default:
		return action.Envelope{}, errcode.Newf(errcode.WrongChannel, "viewers send only on control and pointer")
	}
	if len(b) == 0 {
		return action.Envelope{}, errcode.Newf(errcode.BadEnvelope, "empty message")
	}
	if len(b) > limit {
		return action.Envelope{}, errcode.Newf(errcode.TooLarge, "%s messages are limited to %d bytes", channel, limit)
	}
	if b[0] != Version {
		return action.Envelope{}, errcode.Newf(errcode.BadVersion, "unsupported envelope version (want %d)", Version)
	}
	body := bytes.TrimLeft(b[1:], " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return action.Envelope{}, errcode.Newf(errcode.BadEnvelope, "body is not a JSON object")
	}
	var r rawEnvelope
	err := json.Unmarshal(body, &r)
	var out action.Envelope
	if r.ActionID != nil && len(*r.ActionID) <= MaxActionIDLen {
		out.ActionID = *r.ActionID
	}
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return out, errcode.Newf(errcode.BadField, "%s has the wrong type", safeField(te.Field))
		}
		// The json error may quote input: say only that it did not parse.
		return out, errcode.Newf(errcode.BadEnvelope, "body is not valid JSON")
	}
	e, err := check(channel, &r)
	if err != nil {
		return out, err
	}
	return e, nil
}

func check(channel string, r *rawEnvelope) (action.Envelope, error) {
	var e action.Envelope
	for _, f := range []struct {
		name string
		v    *string
		dst  *string
	}{
		{"browserSessionId", r.BrowserSessionID, &e.BrowserSessionID},
		{"peerId", r.PeerID, &e.PeerID},
		{"producerId", r.ProducerID, &e.ProducerID},
	} {
		if f.v == nil || *f.v == "" {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "%s is missing", f.name)
		}
		if len(*f.v) > MaxIDLen {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "%s is over %d bytes", f.name, MaxIDLen)
		}
		*f.dst = *f.v
	}
	for _, f := range []struct {
		name string
		v    *uint64
		dst  *uint64
	}{
		{"connectionGeneration", r.ConnectionGeneration, &e.ConnectionGeneration},
		{"producerGeneration", r.ProducerGeneration, &e.ProducerGeneration},
	} {
		if f.v == nil || *f.v == 0 {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "%s is missing or 0", f.name)
		}
		*f.dst = *f.v
	}
	if r.PageRevision == nil {
		return action.Envelope{}, errcode.Newf(errcode.BadField, "pageRevision is missing")
	}
	e.PageRevision = *r.PageRevision
	if r.Action == nil {
		return action.Envelope{}, errcode.Newf(errcode.BadField, "action is missing")
	}
	e.Action = *r.Action
	if e.Action.Kind == "" {
		return action.Envelope{}, errcode.Newf(errcode.BadField, "action.kind is missing")
	}
	if !clientKinds[e.Action.Kind] {
		return action.Envelope{}, errcode.Newf(errcode.UnknownKind, "action.kind is not a client action")
	}
	onPointer := e.Action.OnPointerChannel()
	if onPointer != (channel == ChannelPointer) {
		if onPointer {
			return action.Envelope{}, errcode.Newf(errcode.WrongChannel, "pointer_move and wheel travel on the pointer channel")
		}
		return action.Envelope{}, errcode.Newf(errcode.WrongChannel, "only pointer_move and wheel travel on the pointer channel")
	}
	if r.ActionID != nil {
		if len(*r.ActionID) > MaxActionIDLen {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "actionId is over %d bytes", MaxActionIDLen)
		}
		e.ActionID = *r.ActionID
	}
	if onPointer {
		if r.ControlSeq != nil {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "controlSeq is not allowed on the pointer channel")
		}
		if r.PointerSeq == nil || *r.PointerSeq == 0 {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "pointerSeq is missing or 0")
		}
		e.PointerSeq = *r.PointerSeq
	} else {
		if r.PointerSeq != nil {
			return action.Envelope{}, errcode.Newf(errcode.BadField, "pointerSeq is not allowed on the control channel")
		}
		// heartbeat is out of band: its seq and actionId are optional.
		if e.Action.Kind != action.Heartbeat {
			if r.ControlSeq == nil || *r.ControlSeq == 0 {
				return action.Envelope{}, errcode.Newf(errcode.BadField, "controlSeq is missing or 0")
			}
			if e.ActionID == "" {
				return action.Envelope{}, errcode.Newf(errcode.BadField, "actionId is missing")
			}
		}
		if r.ControlSeq != nil {
			e.ControlSeq = *r.ControlSeq
		}
	}
	// The dispatcher fences coordinates on Action.PageRevision: the
	// envelope's revision is the one the viewer saw.
	switch {
	case e.Action.PageRevision == 0:
		e.Action.PageRevision = e.PageRevision
	case e.Action.PageRevision != e.PageRevision:
		return action.Envelope{}, errcode.Newf(errcode.BadField, "action.pageRevision differs from pageRevision")
	}
	return e, nil
}

// safeField keeps a json field path only if it is made of our own names
// (letters and dots), so an error message never carries client bytes.
func safeField(f string) string {
	if f == "" || len(f) > 64 {
		return "a field"
	}
	for _, c := range f {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.') {
			return "a field"
		}
	}
	return f
}

// Encode builds the message a viewer sends for e (Go producers and tests;
// the panel builds the same bytes in JavaScript).
func Encode(e action.Envelope) ([]byte, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return frame(body), nil
}

// EncodeAck builds the control-channel message for an ack.
func EncodeAck(a action.Ack) ([]byte, error) {
	body, err := json.Marshal(struct {
		Type string `json:"type"`
		action.Ack
	}{TypeAck, a})
	if err != nil {
		return nil, fmt.Errorf("encode ack: %w", err)
	}
	return frame(body), nil
}

// EncodeState builds the state-channel message {"type": typ, ...payload}.
// payload must marshal to a JSON object (or be nil); a "type" key in it is
// replaced by typ.
func EncodeState(typ string, payload any) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if payload != nil {
		raw, err := json.Marshal(payload)
		if err != nil {
			return nil, fmt.Errorf("encode %s payload: %w", typ, err)
		}
		if t := bytes.TrimSpace(raw); string(t) != "null" {
			if len(t) == 0 || t[0] != '{' {
				return nil, fmt.Errorf("encode %s payload: not a JSON object", typ)
			}
			if err := json.Unmarshal(t, &fields); err != nil {
				return nil, fmt.Errorf("encode %s payload: %w", typ, err)
			}
		}
	}
	t, err := json.Marshal(typ)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", typ, err)
	}
	fields["type"] = t
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", typ, err)
	}
	return frame(body), nil
}

// Unwrap checks the version byte of a message and returns its JSON body
// (for clients reading acks and state messages).
func Unwrap(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errcode.Newf(errcode.BadEnvelope, "empty message")
	}
	if b[0] != Version {
		return nil, errcode.Newf(errcode.BadVersion, "unsupported envelope version (want %d)", Version)
	}
	return b[1:], nil
}

func frame(body []byte) []byte {
	out := make([]byte, 0, len(body)+1)
	out = append(out, Version)
	return append(out, body...)
}
