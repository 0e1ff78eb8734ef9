package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

var fuzzSeeds = []struct {
	channel string
	body    string
}{
	{ChannelControl, `{` + ident + `,"controlSeq":1,"actionId":"1-1","action":{"kind":"pointer_down","x":0.5,"y":0.5,"button":"left","clickCount":1}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":2,"actionId":"1-2","action":{"kind":"key_down","key":"a","code":"KeyA","modifiers":2,"repeat":true}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":3,"actionId":"1-3","action":{"kind":"text_insert","text":"héllo ✓"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":4,"actionId":"1-4","action":{"kind":"navigate","url":"https://example.com/"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":5,"actionId":"1-5","action":{"kind":"dialog_response","accept":true,"promptText":"x"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":6,"actionId":"1-6","action":{"kind":"clipboard_write","text":"paste me"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":7,"actionId":"1-7","action":{"kind":"clipboard_read"}}`},
	{ChannelControl, `{` + ident + `,"action":{"kind":"heartbeat"}}`},
	{ChannelPointer, `{` + ident + `,"pointerSeq":1,"action":{"kind":"pointer_move","x":0.1,"y":0.9}}`},
	{ChannelPointer, `{` + ident + `,"pointerSeq":2,"action":{"kind":"wheel","x":0.1,"y":0.9,"deltaX":0,"deltaY":-120}}`},
	{ChannelPointer, `{` + ident + `,"pointerSeq":3,"action":{"kind":"pointer_down"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":1,"actionId":"a","action":{"kind":"pointer_move"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":1,"action":{"kind":"reload"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":-1,"actionId":"a","action":{"kind":"reload"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":1,"actionId":"a","action":{"kind":"release_all"}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":1,"actionId":"a","action":{"kind":"pointer_down","x":1e999}}`},
	{ChannelControl, `{` + ident + `,"controlSeq":1,"actionId":"a","action":[]}`},
	{ChannelControl, `{"browserSessionId":null,"action":null}`},
	{ChannelControl, `{"ACTIONID":"x","Action":{"KIND":"reload"}}`},
	{ChannelControl, `{`},
	{ChannelControl, `{}`},
	{ChannelControl, ``},
	{ChannelControl, `null`},
	{ChannelPointer, `[` + strings.Repeat("[", 300)},
	{ChannelState, `{}`},
	{ChannelControl, "{\"peerId\":\"\xff\xfe\"}"},
	{ChannelPointer, `{"pointerSeq":1e3,"action":{"kind":"wheel","deltaY":1e308}}`},
}

var decodeCodes = map[string]bool{
	errcode.BadVersion: true, errcode.BadEnvelope: true, errcode.TooLarge: true, errcode.WrongChannel: true,
	errcode.UnknownKind: true, errcode.BadField: true,
}

// FuzzDecode: Decode never panics; every refusal is a *errcode.Error with one
// of the decode codes; every accepted envelope is well formed and survives
// Encode → Decode unchanged.
func FuzzDecode(f *testing.F) {
	for i, s := range fuzzSeeds {
		b := msg(s.body)
		if i%5 == 4 {
			b = []byte(s.body) // some without the version byte
		}
		f.Add(s.channel == ChannelPointer, b)
	}
	f.Fuzz(func(t *testing.T, pointer bool, b []byte) {
		channel := ChannelControl
		if pointer {
			channel = ChannelPointer
		}
		e, err := Decode(channel, b)
		if err != nil {
			var we *errcode.Error
			if !errors.As(err, &we) || !decodeCodes[we.Code] || we.Message == "" {
				t.Fatalf("bad refusal %#v", err)
			}
			if len(e.ActionID) > MaxActionIDLen || e.ProducerID != "" {
				t.Fatalf("refusal returned more than an actionId: %+v", e)
			}
			return
		}
		if e.Action.OnPointerChannel() != pointer {
			t.Fatalf("kind %q accepted on %s", e.Action.Kind, channel)
		}
		if e.BrowserSessionID == "" || e.PeerID == "" || e.ProducerID == "" || e.ConnectionGeneration == 0 || e.ProducerGeneration == 0 {
			t.Fatalf("identity incomplete: %+v", e)
		}
		if pointer && (e.PointerSeq == 0 || e.ControlSeq != 0) {
			t.Fatalf("pointer seqs: %+v", e)
		}
		if !pointer && e.Action.Kind != action.Heartbeat && (e.ControlSeq == 0 || e.ActionID == "") {
			t.Fatalf("control seqs: %+v", e)
		}
		if e.Action.Kind == action.ReleaseAll {
			t.Fatal("release_all accepted")
		}
		again, err := Encode(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := Decode(channel, again)
		// Re-encoding may grow the message past the limit (escaping).
		if err != nil && CodeOf(err) != errcode.TooLarge {
			t.Fatalf("re-decode: %v", err)
		}
		if err == nil && e != e2 {
			t.Fatalf("round trip changed it:\n%+v\n%+v", e, e2)
		}
	})
}
