// Package action is the vocabulary of things a producer (a person in the
// panel, an agent over the API) asks a browser session to do. The
// dispatcher orders and fences actions; the input executor performs them
// through CDP. Both, and every decoder of client input, share these types.
package action

// Kind names an action. The names are part of the DataChannel and API
// protocol (docs/protocol.md).
type Kind string

const (
	// Pointer channel (unordered, lossy): coalescable moves and wheel.
	PointerMove Kind = "pointer_move"
	Wheel       Kind = "wheel"

	// Control channel (ordered, reliable).
	PointerDown Kind = "pointer_down"
	PointerUp   Kind = "pointer_up"
	// Click is a press and its release at one point, as one action: the
	// executor sends both without waiting in between, and nothing stays
	// held after it. Agents click with it; the panel sends down and up.
	Click   Kind = "click"
	KeyDown Kind = "key_down"
	KeyUp   Kind = "key_up"
	// KeyPress is a key's down and up as one action (as Click is for a
	// button): agents press keys with it.
	KeyPress       Kind = "key_press"
	TextInsert     Kind = "text_insert" // committed text, IME composition end, paste
	Navigate       Kind = "navigate"
	Back           Kind = "back"
	Forward        Kind = "forward"
	Reload         Kind = "reload"
	Stop           Kind = "stop"
	Viewport       Kind = "viewport"
	ClipboardWrite Kind = "clipboard_write" // viewer → page clipboard
	ClipboardRead  Kind = "clipboard_read"  // page selection → viewer
	DialogResponse Kind = "dialog_response"
	Heartbeat      Kind = "heartbeat" // renews held keys/buttons; no effect on the page

	// ReleaseAll is synthesized by the appliance, never accepted from a
	// client: it lifts every key and button a producer holds.
	ReleaseAll Kind = "release_all"
)

// Modifier bits, as CDP's Input domain numbers them.
const (
	ModAlt   = 1
	ModCtrl  = 2
	ModMeta  = 4
	ModShift = 8
)

// Action is one request. Only the fields its Kind uses are meaningful.
type Action struct {
	Kind Kind `json:"kind" cbor:"kind"`

	// Pointer: normalized [0,1] coordinates in the captured viewport.
	X          float64 `json:"x,omitempty" cbor:"x,omitempty"`
	Y          float64 `json:"y,omitempty" cbor:"y,omitempty"`
	Button     string  `json:"button,omitempty" cbor:"button,omitempty"` // left, middle, right
	ClickCount int     `json:"clickCount,omitempty" cbor:"clickCount,omitempty"`
	DeltaX     float64 `json:"deltaX,omitempty" cbor:"deltaX,omitempty"` // wheel, CSS pixels
	DeltaY     float64 `json:"deltaY,omitempty" cbor:"deltaY,omitempty"`

	// Keyboard: DOM KeyboardEvent.key and .code, CDP modifier bits.
	Key       string `json:"key,omitempty" cbor:"key,omitempty"`
	Code      string `json:"code,omitempty" cbor:"code,omitempty"`
	Modifiers int    `json:"modifiers,omitempty" cbor:"modifiers,omitempty"`
	Repeat    bool   `json:"repeat,omitempty" cbor:"repeat,omitempty"`

	// Text for text_insert and clipboard_write. Never logged.
	Text string `json:"text,omitempty" cbor:"text,omitempty"`
	// Replace (text_insert): select all of the focused field first (Ctrl+A),
	// so the text replaces its content; with no text, the content is
	// deleted (Backspace). The keys and the text go out back to back.
	Replace bool `json:"replace,omitempty" cbor:"replace,omitempty"`

	URL string `json:"url,omitempty" cbor:"url,omitempty"`

	Width  int `json:"width,omitempty" cbor:"width,omitempty"`
	Height int `json:"height,omitempty" cbor:"height,omitempty"`

	// Dialog answer.
	Accept     bool   `json:"accept,omitempty" cbor:"accept,omitempty"`
	PromptText string `json:"promptText,omitempty" cbor:"promptText,omitempty"`

	// PageRevision the producer saw; coordinate actions on an older page
	// are refused (stale_page). 0 = not given.
	PageRevision uint64 `json:"pageRevision,omitempty" cbor:"pageRevision,omitempty"`

	// Buttons is never a client's: the dispatcher, which owns held input,
	// sets it on the pointer actions it hands the executor. It is the mouse
	// buttons held on the page as the action starts (ButtonLeft…), and a
	// pointer_up of a button not among them lifts nothing.
	Buttons int `json:"-" cbor:"-"`
}

// Mouse button bits of Action.Buttons, as CDP's Input domain numbers them.
const (
	ButtonLeft   = 1
	ButtonRight  = 2
	ButtonMiddle = 4
)

// ButtonBit is the bit of a button name ("" is left), or 0 for an unknown one.
func ButtonBit(name string) int {
	switch name {
	case "", "left":
		return ButtonLeft
	case "right":
		return ButtonRight
	case "middle":
		return ButtonMiddle
	}
	return 0
}

// OnPointerChannel reports whether the kind travels on the lossy pointer
// channel (and is fenced by pointerSeq rather than controlSeq).
func (a Action) OnPointerChannel() bool { return a.Kind == PointerMove || a.Kind == Wheel }

// Coalescable actions may replace an older queued one of the same producer
// and are not charged to its rate budget.
func (a Action) Coalescable() bool { return a.Kind == PointerMove }

// UsesCoordinates reports whether the action targets a point of the page,
// and so is refused when the page changed under the producer.
func (a Action) UsesCoordinates() bool {
	switch a.Kind {
	case PointerMove, PointerDown, PointerUp, Wheel, Click:
		return true
	}
	return false
}

// Size approximates the memory an action holds, for queue byte bounds.
func (a Action) Size() int {
	return 128 + len(a.Key) + len(a.Code) + len(a.Text) + len(a.URL) + len(a.PromptText) + len(a.Button)
}

// Result of a completed action.
type Result struct {
	// Text is returned by clipboard_read. Never logged.
	Text string `json:"text,omitempty" cbor:"text,omitempty"`
	// PageRevision after the action.
	PageRevision uint64 `json:"pageRevision" cbor:"pageRevision"`
}
