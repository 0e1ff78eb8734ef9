// Package turn is the contract of TURN plugins: relays for viewers that
// cannot reach the appliance directly, with short-lived scoped credentials.
//
// The host mints one credential per peer attach and per ICE restart
// (MintCredential), hands it to the viewer as an ICE server, and revokes the
// scope when the peer closes (Revoke). A plugin accepts only credentials it
// minted and has not revoked, so a credential is worth nothing once its
// peer is gone, even before it expires.
package turn

import (
	"context"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// APIVersions are the turn API versions this SDK speaks, newest last.
var APIVersions = []int{1}

// MaxTTL is the longest credential lifetime a plugin grants; MintCredential
// refuses a longer ttl.
const MaxTTL = 10 * time.Minute

// Scope is what a credential is bound to: a user's peer in a session, at an
// ICE generation (bumped on each ICE restart). All string fields are
// required. Plugins must not put these fields into TURN usernames (which end
// up in logs and packet captures); they map an opaque id to the scope.
type Scope struct {
	User       string
	Session    string
	Peer       string
	Generation int
}

// Credential is a short-lived TURN credential. Never logged.
type Credential struct {
	// Username follows the TURN REST scheme "<unix-expiry>:<opaque-id>".
	Username string
	// Password is base64(HMAC-SHA1(secret, Username)).
	Password string
	// URLs are the turn:/turns: URLs to hand to the viewer.
	URLs    []string
	Expires time.Time
}

// Revoked says what a Revoke removed.
type Revoked struct {
	Credentials int
	Allocations int
}

// Stats are a TURN plugin's counters since it started.
type Stats struct {
	AllocationsActive int
	AllocationsTotal  uint64
	// AuthFailures counts refused credentials (unknown, expired, revoked,
	// wrong HMAC).
	AuthFailures uint64
	// PermissionDenies counts CreatePermission/ChannelBind peers refused by
	// the peer policy.
	PermissionDenies uint64
	// QuotaRejects counts allocations refused for a quota.
	QuotaRejects   uint64
	RelayedBytes   uint64
	RelayedPackets uint64
	// PolicyDrops counts relayed datagrams dropped because their peer
	// address and port are not allowed.
	PolicyDrops uint64
	// BandwidthDrops counts relayed datagrams dropped over a bandwidth cap.
	BandwidthDrops  uint64
	CredentialsLive int
}

// Relay is implemented by TURN plugins and by the host's client shim.
type Relay interface {
	base.Plugin
	// MintCredential returns a credential bound to scope valid for ttl
	// (at most MaxTTL; longer is an error).
	MintCredential(ctx context.Context, scope Scope, ttl time.Duration) (Credential, error)
	// Revoke forgets every credential of scope's user, session and peer
	// whose generation is at most scope.Generation, and closes the
	// allocations made with them. The host calls it with the current
	// generation when the peer closes, and with an older one to retire
	// credentials replaced by an ICE restart.
	Revoke(ctx context.Context, scope Scope) (Revoked, error)
	// Status returns the plugin's counters.
	Status(ctx context.Context) (Stats, error)
}
