package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

const ident = `"browserSessionId":"s1","peerId":"p1","connectionGeneration":7,"producerId":"pr1","producerGeneration":2,"pageRevision":3`

func msg(body string) []byte { return append([]byte{Version}, body...) }

func TestDecodeGood(t *testing.T) {
	e, err := Decode(ChannelControl, msg(`{`+ident+`,"controlSeq":1,"actionId":"2-1","action":{"kind":"pointer_down","x":0.25,"y":0.75,"button":"left","clickCount":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := action.Envelope{BrowserSessionID: "s1", PeerID: "p1", ConnectionGeneration: 7, ProducerID: "pr1",
		ProducerGeneration: 2, PageRevision: 3, ControlSeq: 1, ActionID: "2-1",
		Action: action.Action{Kind: action.PointerDown, X: 0.25, Y: 0.75, Button: "left", ClickCount: 1, PageRevision: 3}}
	if e != want {
		t.Fatalf("got %+v\nwant %+v", e, want)
	}
	e, err = Decode(ChannelPointer, msg(`{`+ident+`,"pointerSeq":9,"action":{"kind":"pointer_move","x":1,"y":0}}`))
	if err != nil || e.PointerSeq != 9 || e.Action.Kind != action.PointerMove || e.Action.X != 1 {
		t.Fatalf("move: %+v %v", e, err)
	}
	// heartbeat: no seq, no actionId needed
	if _, err := Decode(ChannelControl, msg(`{`+ident+`,"action":{"kind":"heartbeat"}}`)); err != nil {
		t.Fatal(err)
	}
	// whitespace before the body, unknown fields ignored
	if _, err := Decode(ChannelControl, msg(" \n{"+ident+`,"future":{"a":[1]},"controlSeq":2,"actionId":"a","action":{"kind":"reload","zzz":1}}`)); err != nil {
		t.Fatal(err)
	}
	// pageRevision 0 is "not given" and allowed
	if e, err := Decode(ChannelControl, msg(strings.Replace(`{`+ident+`,"controlSeq":2,"actionId":"a","action":{"kind":"back"}}`, `"pageRevision":3`, `"pageRevision":0`, 1))); err != nil || e.Action.PageRevision != 0 {
		t.Fatalf("%+v %v", e, err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	in := action.Envelope{BrowserSessionID: "s", PeerID: "p", ConnectionGeneration: 1, ProducerID: "x",
		ProducerGeneration: 1, PageRevision: 5, ControlSeq: 4, ActionID: "1-4",
		Action: action.Action{Kind: action.KeyDown, Key: "a", Code: "KeyA", Modifiers: action.ModShift, PageRevision: 5}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != Version {
		t.Fatal("no version byte")
	}
	out, err := Decode(ChannelControl, b)
	if err != nil || out != in {
		t.Fatalf("%+v %v", out, err)
	}
}

// TestDecodeBad: every bad input gets its code, and the message never
// quotes the input.
func TestDecodeBad(t *testing.T) {
	ctl := func(rest string) string { return `{` + ident + `,` + rest + `}` }
	cases := []struct {
		name, channel string
		b             []byte
		code          string
	}{
		{"empty", ChannelControl, nil, errcode.BadEnvelope},
		{"version only", ChannelControl, []byte{Version}, errcode.BadEnvelope},
		{"version 0", ChannelControl, append([]byte{0}, ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`)...), errcode.BadVersion},
		{"version 2", ChannelPointer, append([]byte{2}, `{}`...), errcode.BadVersion},
		{"text json", ChannelControl, []byte(`{"a":1}`), errcode.BadVersion},
		{"state channel", ChannelState, msg(ctl(`"action":{"kind":"heartbeat"}`)), errcode.WrongChannel},
		{"unknown channel", "chat", msg(`{}`), errcode.WrongChannel},
		{"array", ChannelControl, msg(`[1,2]`), errcode.BadEnvelope},
		{"null", ChannelControl, msg(`null`), errcode.BadEnvelope},
		{"string", ChannelControl, msg(`"launch-missiles"`), errcode.BadEnvelope},
		{"truncated", ChannelControl, msg(`{"peerId":"p`), errcode.BadEnvelope},
		{"two objects", ChannelControl, msg(`{}{}`), errcode.BadEnvelope},
		{"deep", ChannelControl, msg(`{"a":` + strings.Repeat("[", 20000) + `}`), errcode.BadEnvelope},
		{"control too large", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"text_insert","text":"` + strings.Repeat("x", MaxControlSize) + `"}`)), errcode.TooLarge},
		{"pointer too large", ChannelPointer, msg(ctl(`"pointerSeq":1,"action":{"kind":"pointer_move","pad":"` + strings.Repeat("x", MaxPointerSize) + `"}`)), errcode.TooLarge},
		{"missing session", ChannelControl, msg(`{"peerId":"p1","connectionGeneration":7,"producerId":"pr1","producerGeneration":2,"pageRevision":3,"controlSeq":1,"actionId":"a","action":{"kind":"reload"}}`), errcode.BadField},
		{"empty peer", ChannelControl, msg(strings.Replace(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`), `"peerId":"p1"`, `"peerId":""`, 1)), errcode.BadField},
		{"long producer", ChannelControl, msg(strings.Replace(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`), `"producerId":"pr1"`, `"producerId":"`+strings.Repeat("p", 200)+`"`, 1)), errcode.BadField},
		{"zero generation", ChannelControl, msg(strings.Replace(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`), `"producerGeneration":2`, `"producerGeneration":0`, 1)), errcode.BadField},
		{"negative generation", ChannelControl, msg(strings.Replace(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`), `"connectionGeneration":7`, `"connectionGeneration":-7`, 1)), errcode.BadField},
		{"string generation", ChannelControl, msg(strings.Replace(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`), `"connectionGeneration":7`, `"connectionGeneration":"7"`, 1)), errcode.BadField},
		{"missing pageRevision", ChannelControl, msg(strings.Replace(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"reload"}`), `,"pageRevision":3`, ``, 1)), errcode.BadField},
		{"fraction seq", ChannelControl, msg(ctl(`"controlSeq":1.5,"actionId":"a","action":{"kind":"reload"}`)), errcode.BadField},
		{"huge seq", ChannelControl, msg(ctl(`"controlSeq":1e999,"actionId":"a","action":{"kind":"reload"}`)), errcode.BadField},
		{"no action", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a"`)), errcode.BadField},
		{"action not object", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":"reload"`)), errcode.BadField},
		{"no kind", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"x":1}`)), errcode.BadField},
		{"kind number", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":5}`)), errcode.BadField},
		{"x string", ChannelPointer, msg(ctl(`"pointerSeq":1,"action":{"kind":"pointer_move","x":"0.5"}`)), errcode.BadField},
		{"unknown kind", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"launch-missiles"}`)), errcode.UnknownKind},
		{"release_all", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"release_all"}`)), errcode.UnknownKind},
		{"move on control", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"pointer_move"}`)), errcode.WrongChannel},
		{"wheel on control", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"wheel"}`)), errcode.WrongChannel},
		{"click on pointer", ChannelPointer, msg(ctl(`"pointerSeq":1,"action":{"kind":"pointer_down"}`)), errcode.WrongChannel},
		{"heartbeat on pointer", ChannelPointer, msg(ctl(`"pointerSeq":1,"action":{"kind":"heartbeat"}`)), errcode.WrongChannel},
		{"no controlSeq", ChannelControl, msg(ctl(`"actionId":"a","action":{"kind":"reload"}`)), errcode.BadField},
		{"zero controlSeq", ChannelControl, msg(ctl(`"controlSeq":0,"actionId":"a","action":{"kind":"reload"}`)), errcode.BadField},
		{"pointerSeq on control", ChannelControl, msg(ctl(`"controlSeq":1,"pointerSeq":1,"actionId":"a","action":{"kind":"reload"}`)), errcode.BadField},
		{"no actionId", ChannelControl, msg(ctl(`"controlSeq":1,"action":{"kind":"reload"}`)), errcode.BadField},
		{"long actionId", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"` + strings.Repeat("a", 129) + `","action":{"kind":"reload"}`)), errcode.BadField},
		{"no pointerSeq", ChannelPointer, msg(ctl(`"action":{"kind":"pointer_move"}`)), errcode.BadField},
		{"controlSeq on pointer", ChannelPointer, msg(ctl(`"pointerSeq":1,"controlSeq":1,"action":{"kind":"wheel"}`)), errcode.BadField},
		{"pageRevision conflict", ChannelControl, msg(ctl(`"controlSeq":1,"actionId":"a","action":{"kind":"pointer_down","pageRevision":9}`)), errcode.BadField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.channel, c.b)
			var we *errcode.Error
			if !errors.As(err, &we) {
				t.Fatalf("error %v is not a *errcode.Error", err)
			}
			if we.Code != c.code {
				t.Fatalf("code %q (%s), want %q", we.Code, we.Message, c.code)
			}
			if strings.Contains(we.Message, "missiles") || strings.Contains(we.Message, "xxxx") || strings.Contains(we.Message, "pppp") {
				t.Fatalf("message quotes input: %q", we.Message)
			}
		})
	}
}

// TestDecodeKeepsActionID: a refused control message still names its
// actionId, so the viewer can match the rejection.
func TestDecodeKeepsActionID(t *testing.T) {
	e, err := Decode(ChannelControl, msg(`{`+ident+`,"controlSeq":1,"actionId":"2-1","action":{"kind":"nope"}}`))
	if CodeOf(err) != errcode.UnknownKind || e.ActionID != "2-1" {
		t.Fatalf("%+v %v", e, err)
	}
	ack := Reject(e.ActionID, err, 3)
	if ack.Status != action.StatusRejected || ack.Code != errcode.UnknownKind || ack.ActionID != "2-1" || ack.Message == "" {
		t.Fatalf("%+v", ack)
	}
}

func TestEncodeAckAndState(t *testing.T) {
	b, err := EncodeAck(action.Ack{ActionID: "1-1", Status: action.StatusCompleted, ActionRevision: 4, PageRevision: 2,
		Result: &action.Result{Text: "hi", PageRevision: 2}})
	if err != nil {
		t.Fatal(err)
	}
	body, err := Unwrap(b)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m["type"] != "ack" || m["actionId"] != "1-1" || m["status"] != "completed" || m["actionRevision"] != 4.0 ||
		m["result"].(map[string]any)["text"] != "hi" {
		t.Fatalf("%s", body)
	}
	if _, ok := m["code"]; ok {
		t.Fatalf("empty code sent: %s", body)
	}

	b, err = EncodeState(TypePageState, map[string]any{"url": "https://x/", "type": "evil", "pageRevision": 3})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = Unwrap(b)
	m = nil
	_ = json.Unmarshal(body, &m)
	if m["type"] != "page_state" || m["url"] != "https://x/" || m["pageRevision"] != 3.0 {
		t.Fatalf("%s", body)
	}
	if b, err = EncodeState(TypeDialogClosed, nil); err != nil || !bytes.Equal(b, msg(`{"type":"dialog_closed"}`)) {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := EncodeState(TypeError, []int{1}); err == nil {
		t.Fatal("non-object payload accepted")
	}
	if _, err := Unwrap([]byte{9, '{', '}'}); CodeOf(err) != errcode.BadVersion {
		t.Fatal(err)
	}
}

// TestEncodingsUnchanged: the bytes are those core/wire sent while it had
// its own Envelope and Ack types (captured from that code); the one
// addition is retryAfterMs, only on an ack that has it.
func TestEncodingsUnchanged(t *testing.T) {
	ack := func(a action.Ack) string {
		b, err := EncodeAck(a)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	env := func(e action.Envelope) string {
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	rejected := action.Ack{ActionID: "1-2", Status: action.StatusRejected, Code: "rate_limited", Message: "rate limited", PageRevision: 1}
	withRetry := rejected
	withRetry.RetryAfterMs = 250
	for _, c := range []struct{ got, want string }{
		{ack(action.Ack{ActionID: "1-1", Status: action.StatusCompleted, ActionRevision: 4, PageRevision: 2, Result: &action.Result{Text: "hi", PageRevision: 2}}),
			"\x01{\"type\":\"ack\",\"actionId\":\"1-1\",\"status\":\"completed\",\"actionRevision\":4,\"pageRevision\":2,\"result\":{\"text\":\"hi\",\"pageRevision\":2}}"},
		{ack(rejected),
			"\x01{\"type\":\"ack\",\"actionId\":\"1-2\",\"status\":\"rejected\",\"code\":\"rate_limited\",\"message\":\"rate limited\",\"pageRevision\":1}"},
		{ack(withRetry),
			"\x01{\"type\":\"ack\",\"actionId\":\"1-2\",\"status\":\"rejected\",\"code\":\"rate_limited\",\"message\":\"rate limited\",\"pageRevision\":1,\"retryAfterMs\":250}"},
		{env(action.Envelope{BrowserSessionID: "s", PeerID: "p", ConnectionGeneration: 1, ProducerID: "x", ProducerGeneration: 1, PageRevision: 5, ControlSeq: 4, ActionID: "1-4",
			Action: action.Action{Kind: action.KeyDown, Key: "a", Code: "KeyA", Modifiers: action.ModShift, PageRevision: 5}}),
			"\x01{\"browserSessionId\":\"s\",\"peerId\":\"p\",\"connectionGeneration\":1,\"producerId\":\"x\",\"producerGeneration\":1,\"pageRevision\":5,\"controlSeq\":4,\"actionId\":\"1-4\",\"action\":{\"kind\":\"key_down\",\"key\":\"a\",\"code\":\"KeyA\",\"modifiers\":8,\"pageRevision\":5}}"},
		{env(action.Envelope{BrowserSessionID: "s", PeerID: "p", ConnectionGeneration: 1, ProducerID: "x", ProducerGeneration: 1, PageRevision: 5, PointerSeq: 9,
			Action: action.Action{Kind: action.PointerMove, X: 0.5, Y: 0.25, PageRevision: 5}}),
			"\x01{\"browserSessionId\":\"s\",\"peerId\":\"p\",\"connectionGeneration\":1,\"producerId\":\"x\",\"producerGeneration\":1,\"pageRevision\":5,\"pointerSeq\":9,\"action\":{\"kind\":\"pointer_move\",\"x\":0.5,\"y\":0.25,\"pageRevision\":5}}"},
	} {
		if c.got != c.want {
			t.Errorf("got  %q\nwant %q", c.got, c.want)
		}
	}
}
