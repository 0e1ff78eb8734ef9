// Package turn is the contract of TURN plugins: relays for viewers that
// cannot reach the appliance directly, with short-lived scoped credentials.
package turn

import (
	"context"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// APIVersions are the turn API versions this SDK speaks, newest last.
var APIVersions = []int{1}

// Credential is a short-lived TURN credential. Never logged.
type Credential struct {
	Username string
	Password string
	URLs     []string
	Expires  time.Time
}

// Relay is implemented by TURN plugins and by the host's client shim.
type Relay interface {
	base.Plugin
	// MintCredential returns a credential bound to scope (user, session,
	// peer, generation) valid for ttl.
	MintCredential(ctx context.Context, scope string, ttl time.Duration) (Credential, error)
}
