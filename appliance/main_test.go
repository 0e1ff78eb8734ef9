package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain drops the test runner's own TABCAST_* variables (make test sets
// TABCAST_BIN): the commands under test read TABCAST_* as config and refuse
// keys that are not config.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TABCAST_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
