package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFirstbootCmd(t *testing.T) {
	dir := t.TempDir()
	esp, state, root := filepath.Join(dir, "efi"), filepath.Join(dir, "state"), filepath.Join(dir, "root")
	for _, d := range []string{esp, state, root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	run := func(yaml string) (int, string) {
		if yaml != "" {
			if err := os.WriteFile(filepath.Join(esp, "tabcast-firstboot.yaml"), []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var out, errb bytes.Buffer
		code := realMain([]string{"firstboot", "apply", "--esp", esp, "--state", state, "--root", root}, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run("hostname: lab-9\nbogus: 1\n"); code != 3 || !strings.Contains(out, `unknown key "bogus"`) {
		t.Fatalf("rejected file: exit %d, output:\n%s", code, out)
	}
	if code, out := run("hostname: lab-9\nconfig:\n  video:\n    fps: 30\n"); code != 0 {
		t.Fatalf("valid file: exit %d, output:\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/hostname")); err != nil || string(b) != "lab-9\n" {
		t.Fatalf("/etc/hostname: %q %v", b, err)
	}
	if code, out := run(""); code != 0 || !strings.Contains(out, "no tabcast-firstboot.yaml") {
		t.Fatalf("no file: exit %d, output:\n%s", code, out)
	}
	var out, errb bytes.Buffer
	if code := realMain([]string{"firstboot", "nope"}, &out, &errb); code != 2 {
		t.Fatalf("bad subcommand: exit %d", code)
	}
}
