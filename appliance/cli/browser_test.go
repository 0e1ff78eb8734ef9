package cli

import (
	"encoding/json"
	"testing"

	"github.com/spf13/pflag"
)

// TestBrowserRequestNewCommands: the command lines of upload, tabs,
// cookies, storage, eval and the new waits map onto agent requests.
func TestBrowserRequestNewCommands(t *testing.T) {
	for _, c := range []struct {
		args  []string
		flags []string
		want  string
	}{
		{[]string{"upload", "@e3", "cv.pdf", "b.png"}, nil, `{"command":"upload","files":["cv.pdf","b.png"],"ref":"e3"}`},
		{[]string{"tabs"}, nil, `{"command":"tabs"}`},
		{[]string{"tabs", "new", "https://example.com/"}, nil, `{"command":"tabs","op":"new","url":"https://example.com/"}`},
		{[]string{"tabs", "switch", "1"}, nil, `{"command":"tabs","index":1,"op":"switch"}`},
		{[]string{"tabs", "close", "AB12"}, nil, `{"command":"tabs","op":"close","tabId":"AB12"}`},
		{[]string{"cookies"}, []string{"--reveal", "--name", "sid"}, `{"command":"cookies","cookie":{"name":"sid"},"reveal":true}`},
		{[]string{"cookies", "set", "a", "b"}, []string{"--same-site", "Lax", "--http-only"}, `{"command":"cookies","cookie":{"httpOnly":true,"name":"a","sameSite":"Lax","value":"b"},"op":"set"}`},
		{[]string{"cookies", "clear"}, nil, `{"command":"cookies","op":"clear"}`},
		{[]string{"storage", "local", "get", "KEY"}, nil, `{"area":"local","command":"storage","key":"KEY","op":"get"}`},
		{[]string{"storage", "session", "set", "k", "v"}, nil, `{"area":"session","command":"storage","key":"k","op":"set","value":"v"}`},
		{[]string{"storage", "local"}, []string{"--reveal"}, `{"area":"local","command":"storage","reveal":true}`},
		{[]string{"eval", "document.title"}, nil, `{"command":"eval","expression":"document.title"}`},
		{[]string{"wait"}, []string{"--load", "networkidle"}, `{"command":"wait","load":"networkidle"}`},
		{[]string{"wait"}, []string{"--function", "() => ok"}, `{"command":"wait","function":"() =\u003e ok"}`},
	} {
		f := commandFlags(t, c.flags...)
		req, err := browserRequest(c.args[0], c.args[1:], f)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		got, _ := json.Marshal(req)
		if string(got) != c.want {
			t.Errorf("%v:\n got %s\nwant %s", c.args, got, c.want)
		}
	}
	for _, args := range [][]string{{"upload", "@e3"}, {"tabs", "switch"}, {"cookies", "set", "a"}, {"storage"}, {"storage", "local", "set", "k"}, {"eval"}} {
		if _, err := browserRequest(args[0], args[1:], commandFlags(t)); err == nil {
			t.Errorf("%v: no usage error", args)
		}
	}
}

// commandFlags parses flags of the command table as tabcast browser does.
func commandFlags(t *testing.T, flags ...string) *browserFlags {
	t.Helper()
	f := &browserFlags{fs: pflag.NewFlagSet("browser", pflag.ContinueOnError)}
	f.fs.StringVar(&f.timeout, "timeout", "", "")
	addCommandFlags(f.fs)
	if err := f.fs.Parse(flags); err != nil {
		t.Fatalf("%v: %v", flags, err)
	}
	return f
}

// TestBrowserRequestFlags: the flags the command table declares reach the
// request of their commands only, under the names of the HTTP API.
func TestBrowserRequestFlags(t *testing.T) {
	for _, c := range []struct {
		args  []string
		flags []string
		want  string
	}{
		{[]string{"snapshot"}, []string{"-i", "-c", "--depth", "3", "--values", "--ref", "@e7", "--selector", "main"},
			`{"command":"snapshot","compact":true,"includeValues":true,"interactive":true,"maxDepth":3,"ref":"e7","selector":"main"}`},
		{[]string{"click"}, []string{"--role", "button", "--name", "Go"}, `{"command":"click","name":"Go","role":"button"}`},
		{[]string{"dblclick", "@e2"}, nil, `{"command":"dblclick","ref":"e2"}`},
		{[]string{"wait"}, []string{"--selector", "#d", "--hidden", "--timeout", "2s"}, `{"command":"wait","selector":"#d","timeoutMs":2000,"what":"hidden"}`},
		{[]string{"wait"}, []string{"--text", "Done", "--url-contains", "/ok"}, `{"command":"wait","text":"Done","url":"/ok"}`},
		{[]string{"scroll", "@e1"}, []string{"--dy", "600"}, `{"command":"scroll","deltaY":600,"ref":"e1"}`},
		{[]string{"screenshot", "a.png"}, nil, `{"command":"screenshot","format":"png"}`},
		{[]string{"dialog", "accept"}, []string{"--prompt", "yes"}, `{"accept":true,"command":"dialog","promptText":"yes"}`},
		{[]string{"get", "attr", "href", "@e4"}, nil, `{"attr":"href","command":"get","ref":"e4","what":"attr"}`},
		{[]string{"open", "https://example.com/"}, nil, `{"command":"navigate","url":"https://example.com/"}`},
		{[]string{"cookies", "clear", "sid"}, []string{"--name", "other", "--domain", "example.com"}, `{"command":"cookies","cookie":{"domain":"example.com","name":"sid"},"op":"clear"}`},
		{[]string{"press", "Enter"}, []string{"--selector", "x"}, `{"command":"press","key":"Enter"}`},
	} {
		req, err := browserRequest(c.args[0], c.args[1:], commandFlags(t, c.flags...))
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.flags, err)
			continue
		}
		got, _ := json.Marshal(req)
		if string(got) != c.want {
			t.Errorf("%v %v:\n got %s\nwant %s", c.args, c.flags, got, c.want)
		}
	}
	for _, cmd := range []string{"request_human", "sessions-list", "nope"} {
		if _, err := browserRequest(cmd, nil, commandFlags(t)); err == nil {
			t.Errorf("%s: no usage error", cmd)
		}
	}
}
