package cli

import (
	"os"
	"strings"
	"testing"
)

// TestMain drops the test runner's own TABCAST_* variables (make test sets
// TABCAST_BIN): the commands under test read TABCAST_* as config and refuse
// keys that are not config. The embedded defaults are main's: the tests
// read the same file.
func TestMain(m *testing.M) {
	b, err := os.ReadFile("../config.default.yaml")
	if err != nil {
		panic(err)
	}
	defaultConfig = b
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TABCAST_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
