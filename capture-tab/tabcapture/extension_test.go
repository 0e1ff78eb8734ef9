package tabcapture

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// The extension directory of a plugin process that is gone is removed;
// a live plugin's, this process's and names without a pid are left.
func TestRemoveStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	own, err := writeExtension()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(own) != tmp {
		t.Fatalf("extension written to %s, not under TMPDIR %s", own, tmp)
	}
	// A process that ran and was reaped: its pid is free.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	mk := func(name string) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	stale := mk(extDirPrefix + strconv.Itoa(dead) + "-123")
	live := mk(extDirPrefix + "4242-456")
	old := mk(extDirPrefix + "789") // the names before pids were in them
	other := mk("something-else-" + strconv.Itoa(dead))
	removeStale(tmp, func(pid int) bool { return pid == 4242 }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead plugin's directory is still there: %v", err)
	}
	for _, d := range []string{own, live, old, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(d), err)
		}
	}
	if pluginAlive(dead) || pluginAlive(os.Getpid()) {
		t.Error("pluginAlive: a reaped pid or a process that is not capture-tab counts as a live plugin")
	}
}
