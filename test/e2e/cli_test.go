package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/test/harness"
)

// tabcast runs the real binary with an empty config file and no TABCAST_*
// variables from the test runner.
func tabcast(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin, err := harness.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "tabcast"), append(args, "--config", cfg, "--set", "plugins.dir="+bin,
		"--set", "server.dataDir="+data, "--set", "plugins.config.turnd.secretFile="+filepath.Join(data, "turn-secret"))...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TABCAST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestDoctor checks the machine the way an operator would: every check
// passes here (hardware encoders are informational without a GPU).
func TestDoctor(t *testing.T) {
	turnPort, mediaPort := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	out, code := tabcast(t, "doctor", "--json", "--listen", "127.0.0.1:0", "--set", fmt.Sprintf("webrtc.udpPort=%d", mediaPort),
		"--set", fmt.Sprintf("plugins.config.turnd.listenUDP=127.0.0.1:%d", turnPort), "--set", fmt.Sprintf("plugins.config.turnd.listenTCP=127.0.0.1:%d", turnPort),
		"--set", "plugins.config.turnd.relayAddress=127.0.0.1")
	var rep struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Check, Status, Detail, Hint string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if code != 0 || !rep.OK {
		t.Fatalf("doctor failed (exit %d):\n%s", code, out)
	}
	seen := map[string]string{}
	for _, c := range rep.Checks {
		seen[c.Check] = c.Status
	}
	for check, want := range map[string]string{
		"chromium": "ok", "plugin capture-cdp": "ok", "plugin encoder-ffmpeg": "ok",
		"encoder libx264": "ok", "encoder libvpx": "ok", "codecs": "ok",
		// No GPU here: reported, with a hint, and not a failure.
		"encoder h264_vaapi": "warn", "encoder h264_nvenc": "warn",
		// The relay allocates through each listener and refuses a private peer.
		"plugin turnd": "ok",
		fmt.Sprintf("turn turn:127.0.0.1:%d?transport=udp", turnPort): "ok",
		fmt.Sprintf("turn turn:127.0.0.1:%d?transport=tcp", turnPort): "ok",
	} {
		if seen[check] != want {
			t.Errorf("check %q: %q, want %q\n%s", check, seen[check], want, out)
		}
	}
	// A broken plugin directory fails doctor with a hint.
	out, code = tabcast(t, "doctor", "--set", "plugins.capture=no-such-plugin")
	if code == 0 || !strings.Contains(out, "FAIL plugin no-such-plugin") || !strings.Contains(out, "hint:") {
		t.Errorf("doctor with a missing plugin: exit %d\n%s", code, out)
	}
}

// TestConfigCommands checks `config check` and `config print` on the real
// binary: errors name their keys, secrets are masked.
func TestConfigCommands(t *testing.T) {
	out, code := tabcast(t, "config", "check", "--set", "video.fps=0", "--set", "server.lisen=x")
	if code != 1 || !strings.Contains(out, "video.fps") || !strings.Contains(out, "server.lisen") {
		t.Errorf("config check: exit %d\n%s", code, out)
	}
	out, code = tabcast(t, "config", "print", "--set", "plugins.config.turnd.secret=hunter2hunter2")
	if code != 0 || strings.Contains(out, "hunter2") || !strings.Contains(out, "fps: 24") {
		t.Errorf("config print: exit %d\n%s", code, out)
	}
}
