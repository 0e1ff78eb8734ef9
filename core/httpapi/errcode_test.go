package httpapi

import (
	"testing"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/auth"
)

// The auth SDK keeps its own contract codes (plugins never import core);
// the core passes them on as its own, so they must be the same strings.
func TestAuthCodesAreCoreCodes(t *testing.T) {
	for sdk, core := range map[string]string{
		auth.CodeInvalidCredentials: errcode.InvalidCredentials,
		auth.CodeRateLimited:        errcode.RateLimited,
		auth.CodeWeakPassword:       errcode.WeakPassword,
		auth.CodeNotSupported:       errcode.NotSupported,
	} {
		if sdk != core {
			t.Errorf("auth SDK code %q differs from the core's %q", sdk, core)
		}
	}
}
