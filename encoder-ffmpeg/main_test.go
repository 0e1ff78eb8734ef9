package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestSelfTestCommand: `encoder-ffmpeg selftest` in both output forms, its
// exit codes and its refusals of bad usage.
func TestSelfTestCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := selfTest(nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	t.Logf("\n%s", out.String())
	for _, want := range []string{"ok           off    h264  libx264", "ok           off    vp8   libvpx", "vaapi  h264", "vaapi  vp8", "nvenc  h264"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := selfTest([]string{"--json"}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	var rep struct {
		OK      bool
		Results []struct {
			Hardware, Codec, Encoder string
			OK                       bool
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || !rep.OK || len(rep.Results) != len(selfTestCases) {
		t.Fatalf("--json: %v %+v\n%s", err, rep, out.String())
	}

	// Required hardware that is not there fails the run.
	nodes, _ := filepath.Glob("/dev/dri/renderD*")
	if code := selfTest([]string{"--require", "vaapi"}, &out, &errb); len(nodes) == 0 && code != 1 {
		t.Fatalf("--require vaapi without a render node: exit %d", code)
	}
	for _, bad := range [][]string{{"--require", "gpu"}, {"--bogus"}, {"extra"}} {
		errb.Reset()
		if code := selfTest(bad, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Fatalf("%v: exit %d, stderr %q", bad, code, errb.String())
		}
	}
}
