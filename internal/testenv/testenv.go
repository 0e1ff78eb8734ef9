// Package testenv marks the tests that need more than Go: a real Chromium,
// or network namespaces (root). `make test-unit` runs `go test -short` and
// skips them, for a fast edit-compile-test loop; `make test` (the README's
// contract) runs everything, so nothing here hides a test from CI.
package testenv

import "testing"

// NeedsChromium skips t under -short: it launches Chromium.
func NeedsChromium(t testing.TB) {
	t.Helper()
	if short() {
		t.Skip("launches Chromium: run by make test, not make test-unit")
	}
}

// NeedsNetNS skips t under -short: it makes network namespaces.
func NeedsNetNS(t testing.TB) {
	t.Helper()
	if short() {
		t.Skip("makes network namespaces: run by make test, not make test-unit")
	}
}

// ShortSkipsChromium tells a TestMain (which has no t) to launch nothing:
// call it after flag.Parse.
func ShortSkipsChromium() bool { return short() }

// short is -short under go test. The bench (a program, not a test) uses
// test helpers such as test/netns too, where testing.Short panics
// ("Short called before Init"): outside go test nothing is short.
func short() bool { return testing.Testing() && testing.Short() }
