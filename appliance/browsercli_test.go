package main

import (
	"encoding/json"
	"testing"
)

// TestBrowserRequestNewCommands: the command lines of upload, tabs,
// cookies, storage, eval and the new waits map onto agent requests.
func TestBrowserRequestNewCommands(t *testing.T) {
	for _, c := range []struct {
		args  []string
		flags browserFlags
		want  string
	}{
		{[]string{"upload", "@e3", "cv.pdf", "b.png"}, browserFlags{}, `{"command":"upload","files":["cv.pdf","b.png"],"ref":"e3"}`},
		{[]string{"tabs"}, browserFlags{}, `{"command":"tabs"}`},
		{[]string{"tabs", "new", "https://example.com/"}, browserFlags{}, `{"command":"tabs","op":"new","url":"https://example.com/"}`},
		{[]string{"tabs", "switch", "1"}, browserFlags{}, `{"command":"tabs","index":1,"op":"switch"}`},
		{[]string{"tabs", "close", "AB12"}, browserFlags{}, `{"command":"tabs","op":"close","tabId":"AB12"}`},
		{[]string{"cookies"}, browserFlags{reveal: true, name: "sid"}, `{"command":"cookies","cookie":{"name":"sid"},"reveal":true}`},
		{[]string{"cookies", "set", "a", "b"}, browserFlags{sameSite: "Lax", httpOnly: true}, `{"command":"cookies","cookie":{"httpOnly":true,"name":"a","sameSite":"Lax","value":"b"},"op":"set"}`},
		{[]string{"cookies", "clear"}, browserFlags{}, `{"command":"cookies","op":"clear"}`},
		{[]string{"storage", "local", "get", "KEY"}, browserFlags{}, `{"area":"local","command":"storage","key":"KEY","op":"get"}`},
		{[]string{"storage", "session", "set", "k", "v"}, browserFlags{}, `{"area":"session","command":"storage","key":"k","op":"set","value":"v"}`},
		{[]string{"storage", "local"}, browserFlags{reveal: true}, `{"area":"local","command":"storage","reveal":true}`},
		{[]string{"eval", "document.title"}, browserFlags{}, `{"command":"eval","expression":"document.title"}`},
		{[]string{"wait"}, browserFlags{load: "networkidle"}, `{"command":"wait","load":"networkidle"}`},
		{[]string{"wait"}, browserFlags{function: "() => ok"}, `{"command":"wait","function":"() =\u003e ok"}`},
	} {
		f := c.flags
		req, err := browserRequest(c.args[0], c.args[1:], &f)
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
		var f browserFlags
		if _, err := browserRequest(args[0], args[1:], &f); err == nil {
			t.Errorf("%v: no usage error", args)
		}
	}
}
