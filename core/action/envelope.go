package action

// Envelope, Ack and StateEvent are the messages between a producer and a
// session's dispatcher. They are defined once, here, because both ends use
// the same fields: core/wire encodes them on the DataChannels, and
// core/dispatch orders, fences and answers them. A value goes from the
// codec to the dispatcher and back without being copied into another type.

// Envelope is one submitted action with its fencing fields. A viewer's
// envelope also claims the identity of its connection (BrowserSessionID,
// PeerID, ConnectionGeneration), which the receiving connection checks; the
// dispatcher never reads those. The producer fields are stamped from the
// producer's grant before the dispatcher sees the envelope: a client never
// chooses them. The JSON names are the DataChannel protocol's
// (docs/protocol.md, "DataChannels").
type Envelope struct {
	BrowserSessionID     string `json:"browserSessionId"`
	PeerID               string `json:"peerId"`
	ConnectionGeneration uint64 `json:"connectionGeneration"`
	ProducerID           string `json:"producerId"`
	ProducerGeneration   uint64 `json:"producerGeneration"`
	// PageRevision is the revision the viewer saw; the wire codec copies it
	// into Action.PageRevision, which is what the dispatcher fences on.
	PageRevision uint64 `json:"pageRevision"`
	ControlSeq   uint64 `json:"controlSeq,omitempty"` // control-channel actions: must be last+1 (first is 1)
	PointerSeq   uint64 `json:"pointerSeq,omitempty"` // pointer-channel actions (OnPointerChannel): must exceed the high-water mark
	ActionID     string `json:"actionId,omitempty"`   // required for control actions except heartbeat; idempotency key per producer
	Action       Action `json:"action"`
}

// Ack statuses.
const (
	StatusAccepted  = "accepted"
	StatusCompleted = "completed"
	StatusRejected  = "rejected"
)

// Ack answers a submitted action (on a viewer's control channel, or to an
// agent's call).
type Ack struct {
	ActionID       string  `json:"actionId"`
	Status         string  `json:"status"` // accepted | completed | rejected
	Code           string  `json:"code,omitempty"`
	Message        string  `json:"message,omitempty"`
	ActionRevision uint64  `json:"actionRevision,omitempty"`
	PageRevision   uint64  `json:"pageRevision"`
	Result         *Result `json:"result,omitempty"`
	// RetryAfterMs, on a rate_limited refusal: when the producer's next
	// credit is due, so a sender can wait exactly that long.
	RetryAfterMs int `json:"retryAfterMs,omitempty"`
}

// StateEvent is pushed by a session to its interactive viewers' state
// channels (page_state, dialog_opened, dialog_closed, producer, …). Events
// are coalesced per Type while a channel is busy (the newest of a type
// wins), so every event carries the whole state of its type.
type StateEvent struct {
	Type string
	// Payload is JSON-marshalable to an object; its fields are sent beside
	// "type" (docs/protocol.md, "DataChannels").
	Payload any
}
