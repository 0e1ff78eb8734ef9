package input

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

func unitPolicy() Policy {
	p := DefaultPolicy()
	p.AllowLoopbackHosts = []string{"127.0.0.1:8080", "welcome.localhost", "[::1]:9000"}
	p.Resolver = fakeResolver{
		"example.com":              {netip.MustParseAddr("93.184.216.34")},
		"www.example.com":          {netip.MustParseAddr("93.184.216.34")},
		"xn--mnchen-3ya.de":        {netip.MustParseAddr("93.184.216.35")},
		"rebind.test":              {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.1.2.3")},
		"metadata.google.internal": {netip.MustParseAddr("169.254.169.254")},
		"v6private.test":           {netip.MustParseAddr("fd00::1")},
		"nat64.test":               {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"welcome.localhost":        {netip.MustParseAddr("127.0.0.1")},
	}
	return p
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	allowed := []string{
		"https://example.com/",
		"http://example.com:8081/path?q=1#frag",
		"HTTPS://WWW.EXAMPLE.COM/",
		"https://example.com./",
		"about:blank",
		"  https://example.com/  ",
		"https://example.com/\n", // trailing controls are trimmed, as Chromium does
		"http://127.0.0.1:8080/fixture",
		"http://welcome.localhost/",
		"http://[::1]:9000/",
		"https://münchen.de/",
		"http://93.184.216.34/",
	}
	blocked := []string{
		"",
		"example.com",
		"file:///etc/passwd",
		"FILE:///etc/passwd",
		"chrome://settings",
		"chrome-untrusted://x/",
		"devtools://devtools/bundled/inspector.html",
		"view-source:https://example.com/",
		"javascript:alert(1)",
		"data:text/html,<script>alert(1)</script>",
		"blob:https://example.com/uuid",
		"ftp://example.com/",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://172.16.5.4/",
		"http://192.168.1.1/",
		"http://100.100.100.200/",
		"http://127.0.0.1/",
		"http://127.0.0.1:8081/",
		"http://127.1/",
		"http://0x7f000001/",
		"http://2130706433/",
		"http://0177.0.0.1/",
		"http://2852039166/",
		"http://0xA9.0xFE.0xA9.0xFE/",
		"http://169.254.43518/",
		"http://0/",
		"http://0.0.0.0/",
		"http://1.2.3.4.5/",
		"http://256.1.1.1/",
		"http://08.1.1.1/",
		"http://[::1]/",
		"http://[::ffff:169.254.169.254]/",
		"http://[::ffff:a9fe:a9fe]/",
		"http://[64:ff9b::a9fe:a9fe]/",
		"http://[2002:a9fe:a9fe::1]/",
		"http://[fd00:ec2::254]/",
		"http://[fe80::1%25eth0]/",
		"http://[::]/",
		"http://[ff02::1]/",
		"http://224.0.0.1/",
		"http://localhost/",
		"http://LOCALHOST:8080/",
		"http://foo.localhost/",
		"http://metadata.google.internal/computeMetadata/v1/",
		"http://rebind.test/",
		"http://v6private.test/",
		"http://nat64.test/",
		"http://unknown.test/",
		"http://１６９．２５４．１６９．２５４/",
		"http://169.254.169.254\\@example.com/",
		"http://example.com\\@169.254.169.254/",
		"http://user:pass@example.com/",
		"http://example.com@169.254.169.254/",
		"http:169.254.169.254",
		"http:/169.254.169.254",
		"http:///169.254.169.254",
		"http://%31%36%39.254.169.254/",
		"http://exa mple.com/",
		"java\nscript:alert(1)",
		"http://ex\tample.com/",
		"https://" + strings.Repeat("a", maxURLLen) + ".com/",
	}
	p := unitPolicy()
	for _, u := range allowed {
		if err := p.CheckURL(ctx, u); err != nil {
			t.Errorf("CheckURL(%q) = %v, want allowed", u, err)
		}
	}
	for _, u := range blocked {
		err := p.CheckURL(ctx, u)
		var ae *errcode.Error
		if !errors.As(err, &ae) || ae.Code != errcode.NavigationBlocked || ae.Message != "navigation blocked by policy" {
			t.Errorf("CheckURL(%q) = %v, want the generic navigation_blocked", u, err)
		}
	}
}

func TestCheckURLLists(t *testing.T) {
	ctx := context.Background()
	p := unitPolicy()
	p.AllowHosts = []string{"*.example.com", "example.org", "203.0.113.0/24"}
	p.DenyHosts = []string{"bad.example.com", "93.184.216.0/24"}
	p.Resolver = fakeResolver{
		"www.example.com":  {netip.MustParseAddr("198.51.100.7")},
		"bad.example.com":  {netip.MustParseAddr("198.51.100.7")},
		"cdn.example.com":  {netip.MustParseAddr("93.184.216.34")},
		"example.org":      {netip.MustParseAddr("198.51.100.8")},
		"example.com":      {netip.MustParseAddr("198.51.100.9")},
		"evil-example.com": {netip.MustParseAddr("198.51.100.9")},
	}
	cases := map[string]bool{
		"https://www.example.com/":  true,
		"https://example.org/":      true,
		"https://203.0.113.9/":      true,
		"http://127.0.0.1:8080/":    true,  // the exception passes AllowHosts
		"https://example.com/":      false, // *.suffix is subdomains only
		"https://evil-example.com/": false,
		"https://bad.example.com/":  false,
		"https://cdn.example.com/":  false, // resolves into a denied prefix
		"https://198.51.100.7/":     false,
	}
	for u, want := range cases {
		if got := p.CheckURL(ctx, u) == nil; got != want {
			t.Errorf("CheckURL(%q) allowed = %v, want %v", u, got, want)
		}
	}

	p = unitPolicy()
	p.DenyPrivate = false
	p.AllowSchemes = []string{"http", "https", "data", "file"}
	for u, want := range map[string]bool{
		"http://10.0.0.1/":                 true,
		"http://localhost/":                true,
		"data:text/html,hi":                true,
		"file:///etc/passwd":               false, // never, whatever the config
		"http://unknown.test/":             true,  // no lookup needed
		"data://169.254.169.254/text/html": true,
	} {
		if got := p.CheckURL(ctx, u) == nil; got != want {
			t.Errorf("DenyPrivate off: CheckURL(%q) allowed = %v, want %v", u, got, want)
		}
	}
}

// slowResolver never answers before its context ends.
type slowResolver struct{}

func (slowResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestCheckURLFailsClosed(t *testing.T) {
	p := DefaultPolicy()
	p.Resolver = slowResolver{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.CheckURL(ctx, "https://example.com/"); err == nil {
		t.Fatal("an unanswered lookup was allowed")
	}
	p = DefaultPolicy()
	p.BlockedShortcuts = []string{"Ctrl+Nope"}
	if err := p.CheckURL(context.Background(), "about:blank"); err == nil {
		t.Fatal("an invalid policy allowed a URL")
	}
	if _, err := p.compile(); err == nil {
		t.Fatal("invalid shortcut compiled")
	}
	for _, bad := range []Policy{
		{AllowHosts: []string{"10.0.0.0/33"}},
		{DenyHosts: []string{"exa mple.com"}},
		{AllowLoopbackHosts: []string{"127.0.0.1:99999"}},
		{AllowSchemes: []string{" "}},
		{MinWidth: 2000, MaxWidth: 1000},
	} {
		if _, err := bad.compile(); err == nil {
			t.Errorf("policy %+v compiled", bad)
		}
	}
}

func TestWHATWGIPv4(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":     "127.0.0.1",
		"127.1":         "127.0.0.1",
		"0x7f.1":        "127.0.0.1",
		"2130706433":    "127.0.0.1",
		"0177.0.0.1":    "127.0.0.1",
		"0x":            "0.0.0.0",
		"169.254.43518": "169.254.169.254",
		"4294967295":    "255.255.255.255",
		"4294967296":    "",
		"1.2.3.256":     "",
		"1.2.65536":     "",
		"09":            "",
		"1.2.3.4.5":     "",
		"example.com":   "-",
		"1.2.3.com":     "-",
		"0x1g":          "-",
	}
	for in, want := range cases {
		a, isIP, ok := parseWHATWGIPv4(in)
		switch {
		case want == "-":
			if isIP {
				t.Errorf("%q parsed as an IPv4 address", in)
			}
		case want == "":
			if !isIP || ok {
				t.Errorf("%q: isIP %v ok %v, want an invalid address", in, isIP, ok)
			}
		default:
			if !ok || a.String() != want {
				t.Errorf("%q = %v (%v), want %s", in, a, ok, want)
			}
		}
	}
}

func TestShortcuts(t *testing.T) {
	type ev struct {
		key, code string
		mods      int
	}
	cases := []struct {
		rule  string
		match []ev
		miss  []ev
	}{
		{"Ctrl+O", []ev{{"o", "KeyO", action.ModCtrl}, {"O", "KeyO", action.ModCtrl | action.ModShift}, {"o", "KeyO", action.ModMeta}, {"o", "KeyS", action.ModCtrl}, {"щ", "KeyO", action.ModCtrl}},
			[]ev{{"o", "KeyO", 0}, {"o", "KeyO", action.ModAlt}, {"p", "KeyP", action.ModCtrl}}},
		{"Ctrl+Shift+I", []ev{{"I", "KeyI", action.ModCtrl | action.ModShift}, {"I", "KeyI", action.ModMeta | action.ModShift | action.ModAlt}},
			[]ev{{"i", "KeyI", action.ModCtrl}, {"I", "KeyI", action.ModShift}}},
		{"F12", []ev{{"F12", "F12", 0}, {"F12", "F12", action.ModShift}, {"F12", "", 0}}, []ev{{"F11", "F11", 0}}},
		{"cmd+alt+esc", []ev{{"Escape", "Escape", action.ModMeta | action.ModAlt}}, []ev{{"Escape", "Escape", action.ModMeta}}},
		{"Ctrl++", []ev{{"+", "Equal", action.ModCtrl | action.ModShift}}, []ev{{"=", "Equal", action.ModCtrl}}},
		{"Ctrl+1", []ev{{"1", "Digit1", action.ModCtrl}, {"!", "Digit1", action.ModCtrl | action.ModShift}}, []ev{{"2", "Digit2", action.ModCtrl}}},
		{"Alt+ArrowLeft", []ev{{"ArrowLeft", "ArrowLeft", action.ModAlt}}, []ev{{"ArrowRight", "ArrowRight", action.ModAlt}}},
		{"Ctrl+Backquote", []ev{{"`", "Backquote", action.ModCtrl}}, nil},
	}
	for _, c := range cases {
		sc, err := parseShortcut(c.rule)
		if err != nil {
			t.Errorf("parse %q: %v", c.rule, err)
			continue
		}
		for _, e := range c.match {
			if !sc.matches(e.key, e.code, e.mods) {
				t.Errorf("%q does not match %+v", c.rule, e)
			}
		}
		for _, e := range c.miss {
			if sc.matches(e.key, e.code, e.mods) {
				t.Errorf("%q matches %+v", c.rule, e)
			}
		}
	}
	for _, bad := range []string{"", "+", "Ctrl+", "Hyper+A", "Ctrl+NotAKey", "F25"} {
		if _, err := parseShortcut(bad); err == nil {
			t.Errorf("parseShortcut(%q) accepted", bad)
		}
	}
}

func TestMapKey(t *testing.T) {
	cases := []struct {
		a            action.Action
		vk           int
		text         string
		location     int
		keypad, fail bool
	}{
		{a: action.Action{Key: "a", Code: "KeyA"}, vk: 65, text: "a"},
		{a: action.Action{Key: "A", Code: "KeyA", Modifiers: action.ModShift}, vk: 65, text: "A"},
		{a: action.Action{Key: "a", Code: "KeyQ"}, vk: 65, text: "a"}, // AZERTY
		{a: action.Action{Key: "a", Code: "KeyA", Modifiers: action.ModCtrl}, vk: 65},
		{a: action.Action{Key: "@", Code: "KeyQ", Modifiers: action.ModCtrl | action.ModAlt}, vk: 81, text: "@"}, // AltGr
		{a: action.Action{Key: "é", Code: "Digit2"}, vk: 50, text: "é"},
		{a: action.Action{Key: "ö"}, vk: 0, text: "ö"},
		{a: action.Action{Key: "👍🏽"}, vk: 0, text: "👍🏽"},
		{a: action.Action{Key: "Enter", Code: "Enter"}, vk: 13, text: "\r"},
		{a: action.Action{Key: "Enter", Code: "NumpadEnter"}, vk: 13, text: "\r", location: 3, keypad: true},
		{a: action.Action{Key: "Tab", Code: "Tab"}, vk: 9},
		{a: action.Action{Key: "Backspace", Code: "Backspace"}, vk: 8},
		{a: action.Action{Key: "Escape", Code: "Escape"}, vk: 27},
		{a: action.Action{Key: "ArrowLeft", Code: "ArrowLeft"}, vk: 37},
		{a: action.Action{Key: "ArrowDown", Code: "ArrowDown"}, vk: 40},
		{a: action.Action{Key: "Delete", Code: "Delete"}, vk: 46},
		{a: action.Action{Key: "Home", Code: "Home"}, vk: 36},
		{a: action.Action{Key: "PageDown", Code: "PageDown"}, vk: 34},
		{a: action.Action{Key: " ", Code: "Space"}, vk: 32, text: " "},
		{a: action.Action{Key: "F5", Code: "F5"}, vk: 116},
		{a: action.Action{Key: ";", Code: "Semicolon"}, vk: 186, text: ";"},
		{a: action.Action{Key: "?", Code: "Slash", Modifiers: action.ModShift}, vk: 191, text: "?"},
		{a: action.Action{Key: "?"}, vk: 191, text: "?"},
		{a: action.Action{Key: "7", Code: "Numpad7"}, vk: 103, text: "7", location: 3, keypad: true},
		{a: action.Action{Key: "Home", Code: "Numpad7"}, vk: 36, location: 3, keypad: true},
		{a: action.Action{Key: "Shift", Code: "ShiftRight"}, vk: 16, location: 2},
		{a: action.Action{Key: "Control", Code: "ControlLeft"}, vk: 17, location: 1},
		{a: action.Action{Key: "Dead", Code: "BracketLeft"}, vk: 219},
		{a: action.Action{Code: "KeyB"}, vk: 66, text: "b"},
		{a: action.Action{Code: "KeyB", Modifiers: action.ModShift}, vk: 66, text: "B"},
		{a: action.Action{Key: "Enter", Code: "Enter", Modifiers: action.ModCtrl}, vk: 13},
		{a: action.Action{}, fail: true},
		{a: action.Action{Key: "\x00"}, fail: true},
		{a: action.Action{Key: "\t"}, fail: true},
		{a: action.Action{Key: strings.Repeat("x", 33)}, fail: true},
		{a: action.Action{Key: "\xff"}, fail: true},
	}
	for _, c := range cases {
		ke, err := mapKey(c.a)
		if c.fail {
			if err == nil {
				t.Errorf("mapKey(%+v) accepted", c.a)
			}
			continue
		}
		if err != nil {
			t.Errorf("mapKey(%+v): %v", c.a, err)
			continue
		}
		if ke.vk != c.vk || ke.text != c.text || ke.location != c.location || ke.keypad != c.keypad {
			t.Errorf("mapKey(%+v) = vk %d text %q location %d keypad %v; want %d %q %d %v",
				c.a, ke.vk, ke.text, ke.location, ke.keypad, c.vk, c.text, c.location, c.keypad)
		}
	}
}

func TestClipboardAndEditKeys(t *testing.T) {
	op := func(key, code string, mods int) string {
		ke, err := mapKey(action.Action{Key: key, Code: code, Modifiers: mods})
		if err != nil {
			t.Fatal(err)
		}
		return clipboardOp(ke)
	}
	for _, c := range []struct {
		key, code string
		mods      int
		want      string
	}{
		{"c", "KeyC", action.ModCtrl, "copy"},
		{"c", "KeyC", action.ModMeta, "copy"},
		{"C", "KeyC", action.ModCtrl | action.ModShift, "copy"},
		{"с", "KeyC", action.ModCtrl, "copy"}, // Cyrillic layout
		{"v", "KeyV", action.ModCtrl, "paste"},
		{"x", "KeyX", action.ModCtrl, "cut"},
		{"Insert", "Insert", action.ModCtrl, "copy"},
		{"Insert", "Insert", action.ModShift, "paste"},
		{"Delete", "Delete", action.ModShift, "cut"},
		{"v", "KeyV", 0, ""},
		{"v", "KeyV", action.ModCtrl | action.ModAlt, ""},
		{"Delete", "Delete", 0, ""},
	} {
		if got := op(c.key, c.code, c.mods); got != c.want {
			t.Errorf("clipboardOp(%q %q %d) = %q, want %q", c.key, c.code, c.mods, got, c.want)
		}
	}
	cmd := func(key, code string, mods int) string {
		ke, _ := mapKey(action.Action{Key: key, Code: code, Modifiers: mods})
		return strings.Join(editCommands(ke), ",")
	}
	if got := cmd("a", "KeyA", action.ModMeta); got != "selectAll" {
		t.Errorf("Cmd+A commands = %q", got)
	}
	if got := cmd("Z", "KeyZ", action.ModCtrl|action.ModShift); got != "redo" {
		t.Errorf("Ctrl+Shift+Z commands = %q", got)
	}
	if got := cmd("a", "KeyA", 0); got != "" {
		t.Errorf("plain a commands = %q", got)
	}
}

func TestCountClick(t *testing.T) {
	now := time.Unix(1000, 0)
	e := &Executor{now: func() time.Time { return now }}
	step := func(d time.Duration, x float64, bit, given, want int) {
		t.Helper()
		now = now.Add(d)
		if got := e.countClick(bit, x, 10, given); got != want {
			t.Fatalf("count = %d, want %d", got, want)
		}
	}
	step(0, 10, bitLeft, 0, 1)
	step(100*time.Millisecond, 12, bitLeft, 0, 2)
	step(100*time.Millisecond, 12, bitLeft, 0, 3)
	step(100*time.Millisecond, 12, bitLeft, 0, 3)
	step(600*time.Millisecond, 12, bitLeft, 0, 1)  // too late
	step(100*time.Millisecond, 30, bitLeft, 0, 1)  // too far
	step(100*time.Millisecond, 30, bitRight, 0, 1) // another button
	step(time.Second, 30, bitLeft, 2, 2)           // the client's count wins
	step(0, 30, bitLeft, 99, 3)
}

// FuzzCheckURL: never panics, never echoes the URL, and never allows what
// Chromium would read as a private address. The resolver is fake (all
// names resolve to loopback), so nothing leaves the machine.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/", "http://169.254.169.254/", "http://0x7f.1/", "http://[::ffff:7f00:1]/",
		"file:///etc/passwd", "about:blank", "data:text/html,x", "http://127.0.0.1:8080/", "http://１２７．０．０．１/",
		"http://a@b@c/", "http:\\\\evil", "HTTP://EXAMPLE.COM:65536/", "http://[fe80::1%25lo]/", "ws://x/", "http://xn--/",
	} {
		f.Add(s)
	}
	p := DefaultPolicy()
	p.AllowSchemes = []string{"http", "https", "ws", "data"}
	p.AllowLoopbackHosts = []string{"127.0.0.1:8080"}
	p.Resolver = fakeAll(netip.MustParseAddr("127.0.0.2"))
	c, err := p.compile()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := p.CheckURL(ctx, raw)
		if err != nil {
			var ae *errcode.Error
			if !errors.As(err, &ae) || ae.Message != "navigation blocked by policy" {
				t.Fatalf("bad refusal %v", err)
			}
			return
		}
		// Allowed: it must be about:blank, data:, or a host that is not a
		// private address (every name resolves to one here), or the
		// exception.
		if c.check(ctx, raw) != "" {
			t.Fatal("CheckURL and check disagree")
		}
		s := trimURL(raw)
		if strings.EqualFold(s, "about:blank") || strings.HasPrefix(strings.ToLower(s), "data:") {
			return
		}
		u, tg, ok := reparse(s)
		if !ok {
			t.Fatalf("allowed %q, which does not parse", raw)
		}
		if !tg.addr.IsValid() {
			t.Fatalf("allowed %q: name %q resolves to loopback", raw, tg.name)
		}
		if isPrivate(tg.addr) && !(tg.addr == netip.MustParseAddr("127.0.0.1") && tg.port == "8080") {
			t.Fatalf("allowed %q: private %v (%v)", raw, tg.addr, u)
		}
	})
}

type fakeAll netip.Addr

func (f fakeAll) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.Addr(f)}, nil
}

// reparse reads an allowed URL's host the way check does.
func reparse(s string) (*url.URL, hostTarget, bool) {
	u, err := url.Parse(trimURL(s))
	if err != nil {
		return nil, hostTarget{}, false
	}
	tg, reason := canonicalTarget(u, strings.ToLower(u.Scheme))
	return u, tg, reason == ""
}
