package signaling

import (
	"errors"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/core/errcode"
)

var decodeSeeds = []string{
	`{"type":"hello","codec":"auto","codecs":["h264","vp8"]}`,
	`{"type":"hello","codec":"VP8","codecs":["vp8","av1","vp9"]}`,
	`{"type":"hello"}`,
	`{"type":"hello","codec":null,"codecs":null}`,
	`{"type":"hello","interactive":false}`,
	`{"type":"hello","interactive":true,"codec":"vp8"}`,
	`{"type":"hello","interactive":"yes"}`,
	`{"type":"hello","interactive":0}`,
	`{"type":"answer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"}`,
	`{"type":"candidate","candidate":{"candidate":"candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host","sdpMid":"0","sdpMLineIndex":0}}`,
	`{"type":"candidate","candidate":{"candidate":"","sdpMid":null,"sdpMLineIndex":null,"usernameFragment":"abcd"}}`,
	`{"type":"keyframe"}`,
	`{"type":"ping"}`,
	`{"type":"bye"}`,
	// truncated and broken JSON
	`{"type":"hello","codec":"au`,
	`{"type":`,
	`{`,
	``,
	`   `,
	`null`,
	`[]`,
	`"hello"`,
	`123`,
	`{"type":"ping"}{"type":"ping"}`,
	"{\"type\":\"ping\",\"x\":\"\xff\xfe\"}",
	// wrong types
	`{"type":5}`,
	`{"type":null}`,
	`{"type":["hello"]}`,
	`{"type":"hello","codec":7}`,
	`{"type":"hello","codec":"h265"}`,
	`{"type":"hello","codecs":"h264"}`,
	`{"type":"hello","codecs":[1,2]}`,
	`{"type":"hello","codecs":[""]}`,
	`{"type":"answer"}`,
	`{"type":"answer","sdp":42}`,
	`{"type":"answer","sdp":"  "}`,
	`{"type":"candidate"}`,
	`{"type":"candidate","candidate":"candidate:1 1 udp 1 1.2.3.4 5 typ host"}`,
	`{"type":"candidate","candidate":{"sdpMid":"0"}}`,
	`{"type":"candidate","candidate":{"candidate":"x","sdpMLineIndex":-1}}`,
	`{"type":"candidate","candidate":{"candidate":"x","sdpMLineIndex":70000}}`,
	`{"type":"candidate","candidate":{"candidate":"x","sdpMLineIndex":0.5}}`,
	`{"type":"nope"}`,
	`{"type":""}`,
	// nested garbage
	`{"type":"hello","codecs":[[[[[[[[[[]]]]]]]]]]}`,
	`{"type":"ping","junk":{"a":{"b":{"c":[1,{"d":null}]}}}}`,
	`{"type":"candidate","candidate":{"candidate":{"candidate":"x"}}}`,
	// huge values
	`{"type":"ping","pad":"` + strings.Repeat("x", MaxMessageSize) + `"}`,
	`{"type":"answer","sdp":"` + strings.Repeat("a", MaxSDPSize+1) + `"}`,
	`{"type":"hello","codecs":["` + strings.Repeat("h", 100) + `"]}`,
	`{"type":"hello","codecs":[` + strings.Repeat(`"vp8",`, 40) + `"vp8"]}`,
	`{"type":"candidate","candidate":{"candidate":"` + strings.Repeat("c", 2000) + `"}}`,
	strings.Repeat("[", 5000),
	`{"type":"ping","n":1e999999}`,
}

var validCodes = map[string]bool{
	errcode.BadJSON: true, errcode.UnknownType: true, errcode.BadField: true, errcode.TooLarge: true,
	errcode.SDPTooLarge: true,
}

func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			var pe *errcode.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			if !validCodes[pe.Code] {
				t.Fatalf("unexpected code %q", pe.Code)
			}
			if len(pe.Message) > 200 {
				t.Fatalf("error message too long (may quote input): %q", pe.Message)
			}
			return
		}
		switch m.Type {
		case TypeHello:
			if m.Codec != CodecAuto && m.Codec != CodecH264 && m.Codec != CodecVP8 {
				t.Fatalf("hello with codec %q", m.Codec)
			}
			if len(m.Codecs) > maxCodecs {
				t.Fatal("too many codecs passed")
			}
		case TypeAnswer:
			if m.SDP == "" || len(m.SDP) > MaxSDPSize {
				t.Fatalf("answer sdp of %d bytes passed", len(m.SDP))
			}
		case TypeCandidate:
			if len(m.Candidate.Candidate) > maxCandidateSize {
				t.Fatal("long candidate passed")
			}
		case TypeKeyframe, TypePing, TypeBye:
		default:
			t.Fatalf("type %q passed", m.Type)
		}
		if m.Type != TypeAnswer && len(data) > MaxMessageSize {
			t.Fatalf("%d-byte %s passed", len(data), m.Type)
		}
	})
}

func TestDecodeCodes(t *testing.T) {
	cases := []struct {
		in   string
		code string // "" = valid
	}{
		{`{"type":"hello","codec":"auto","codecs":["H264","vp8"]}`, ""},
		{`{"type":"ping"}`, ""},
		{`{"type":"bye"}`, ""},
		{`{"type":"keyframe"}`, ""},
		{`{"type":"answer","sdp":"v=0\r\n"}`, ""},
		{`{"type":"candidate","candidate":{"candidate":"candidate:1 1 udp 1 127.0.0.1 9 typ host","sdpMid":"0","sdpMLineIndex":0}}`, ""},
		{`not json`, errcode.BadJSON},
		{`{"type":"hello"`, errcode.BadJSON},
		{`[1]`, errcode.BadJSON},
		{`{"type":"nope"}`, errcode.UnknownType},
		{`{"codec":"vp8"}`, errcode.BadField},
		{`{"type":1}`, errcode.BadField},
		{`{"type":"hello","codec":"av1"}`, errcode.BadField},
		{`{"type":"hello","codecs":"vp8"}`, errcode.BadField},
		{`{"type":"hello","interactive":1}`, errcode.BadField},
		{`{"type":"answer","sdp":1}`, errcode.BadField},
		{`{"type":"candidate","candidate":{"candidate":"x","sdpMLineIndex":-1}}`, errcode.BadField},
		{`{"type":"ping","pad":"` + strings.Repeat("x", MaxMessageSize) + `"}`, errcode.TooLarge},
		{`{"type":"answer","sdp":"` + strings.Repeat("a", MaxSDPSize+1) + `"}`, errcode.SDPTooLarge},
		{`{"type":"answer","sdp":"` + strings.Repeat("a", MaxAnswerMessageSize) + `"}`, errcode.TooLarge},
	}
	if m, err := Decode([]byte(`{"type":"hello","interactive":false}`)); err != nil || m.Interactive {
		t.Errorf("interactive:false: %+v %v", m, err)
	}
	for _, c := range cases {
		m, err := Decode([]byte(c.in))
		got := ""
		if err != nil {
			got = errorCode(err)
		}
		if got != c.code {
			t.Errorf("Decode(%.60q) = %q (%v), want %q", c.in, got, err, c.code)
		}
		if err == nil && m.Type == TypeHello && (m.Codecs[0] != "h264" || !m.Interactive) {
			t.Errorf("hello %+v: codecs not lower-cased or not interactive by default", m)
		}
	}
}

func TestChooseCodec(t *testing.T) {
	both := []string{"h264", "vp8"}
	cases := []struct {
		want           string
		viewer, source []string
		codec, code    string
	}{
		{"auto", both, both, "h264", ""},
		{"auto", []string{"vp8"}, both, "vp8", ""},
		{"auto", both, []string{"vp8"}, "vp8", ""},
		{"auto", nil, both, "h264", ""},
		{"auto", []string{"av1"}, both, "", errcode.CodecUnsupported},
		// The session's order is its preference (VP8 first under tab capture).
		{"auto", both, []string{"vp8", "h264"}, "vp8", ""},
		{"auto", []string{"h264"}, []string{"vp8", "h264"}, "h264", ""},
		{"vp8", both, both, "vp8", ""},
		{"h264", []string{"vp8"}, both, "", errcode.CodecUnsupported},
		{"h264", both, []string{"vp8"}, "", errcode.CodecUnsupported},
	}
	for _, c := range cases {
		got, err := chooseCodec(c.want, c.viewer, c.source)
		code := ""
		if err != nil {
			code = errorCode(err)
		}
		if got != c.codec || code != c.code {
			t.Errorf("chooseCodec(%s, %v, %v) = %q, %q; want %q, %q", c.want, c.viewer, c.source, got, code, c.codec, c.code)
		}
	}
}
