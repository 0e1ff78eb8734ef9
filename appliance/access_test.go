package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/appliance/config"
)

// TestInitialPasswordNotInTheJournal: the one-time admin password goes to
// a console, never to a stdout that systemd connected to the journal.
func TestInitialPasswordNotInTheJournal(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "initial-admin-password")
	if err := os.WriteFile(pwFile, []byte("s3cret-one-time\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{}
	cfg.Auth.Plugin = "auth-local"
	cfg.Plugins.Config = map[string]map[string]any{"auth-local": {"initialPasswordFile": pwFile}}
	started := time.Now()

	for _, journal := range []bool{false, true} {
		out, err := os.Create(filepath.Join(dir, fmt.Sprintf("stdout-%v", journal)))
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("JOURNAL_STREAM", "")
		if journal {
			st, err := out.Stat()
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", sys.Dev, sys.Ino))
		}
		printInitialPassword(cfg, started, out)
		out.Close()
		b, _ := os.ReadFile(out.Name())
		got := string(b)
		if !strings.Contains(got, pwFile) {
			t.Errorf("journal=%v: the file is not named: %q", journal, got)
		}
		if shown := strings.Contains(got, "s3cret-one-time"); shown == journal {
			t.Errorf("journal=%v: password shown=%v: %q", journal, shown, got)
		}
	}
}
