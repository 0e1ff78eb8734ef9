package web_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/appliance/web"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/wire"
)

// exportedConst matches `export const NAME = <number or a * b>;` in wire.js.
var exportedConst = regexp.MustCompile(`(?m)^export const ([A-Z_]+) = ([0-9 *]+);`)

// jsConstants reads wire.js's numeric constants, evaluating products.
func jsConstants(t *testing.T) map[string]int {
	t.Helper()
	src, err := web.FS.ReadFile("wire.js")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range exportedConst.FindAllStringSubmatch(string(src), -1) {
		v := 1
		for _, f := range strings.Split(m[2], "*") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("wire.js %s: %q is not a number or a product", m[1], m[2])
			}
			v *= n
		}
		out[m[1]] = v
	}
	return out
}

// TestWireConstantsMatchGo fails when the panel's copy of a wire constant
// (wire.js) differs from the Go constant it mirrors.
func TestWireConstantsMatchGo(t *testing.T) {
	js := jsConstants(t)
	want := map[string]int{
		"VERSION":            int(wire.Version),
		"POINTER_HIGH_WATER": peer.PointerHighWater,
		"POINTER_LOW_WATER":  peer.PointerLowWater,
		"MAX_WHEEL_DELTA":    dispatch.MaxWheelDelta,
		"MOD_ALT":            action.ModAlt,
		"MOD_CTRL":           action.ModCtrl,
		"MOD_META":           action.ModMeta,
		"MOD_SHIFT":          action.ModShift,
	}
	for name, w := range want {
		got, ok := js[name]
		if !ok {
			t.Errorf("wire.js has no %s", name)
			continue
		}
		if got != w {
			t.Errorf("wire.js %s = %d, Go says %d", name, got, w)
		}
	}
	for name := range js {
		if _, ok := want[name]; !ok {
			t.Errorf("wire.js %s mirrors no Go constant this test knows: add it here", name)
		}
	}
}
