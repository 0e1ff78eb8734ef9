// Package access decides who may use the appliance and what they may do:
// the principal behind a request (a panel login or an API token), its role,
// and the rules for one browser session (its owner and invited viewers).
// Passwords are checked by the auth plugin; access never sees a hash.
package access

import (
	"context"
	"slices"
)

// Role is what a user may do across the appliance.
type Role string

// Roles, most powerful first.
const (
	// RoleAdmin manages users, tokens and plugins and operates every session.
	RoleAdmin Role = "admin"
	// RoleOperator creates sessions and operates their own.
	RoleOperator Role = "operator"
	// RoleViewer watches the sessions they are invited to, without input.
	RoleViewer Role = "viewer"
)

// ParseRole accepts the three role names.
func ParseRole(s string) (Role, bool) {
	switch r := Role(s); r {
	case RoleAdmin, RoleOperator, RoleViewer:
		return r, true
	}
	return "", false
}

// Highest picks the strongest known role of a list (an auth plugin may
// report several); ok is false when none is known.
func Highest(roles []string) (Role, bool) {
	for _, r := range []Role{RoleAdmin, RoleOperator, RoleViewer} {
		if slices.Contains(roles, string(r)) {
			return r, true
		}
	}
	return "", false
}

// Token scopes. A panel login holds every scope its role allows.
const (
	// ScopeRead lists and watches sessions and reads status.
	ScopeRead = "read"
	// ScopeControl creates, drives and closes sessions.
	ScopeControl = "control"
	// ScopeAdmin manages tokens and reads the audit log (admins only).
	ScopeAdmin = "admin"
	// ScopeCDP attaches a DevTools Protocol client to a session it may
	// operate (operators and admins). A separate scope because a CDP
	// client runs script in the page, which control alone does not allow.
	ScopeCDP = "cdp"
)

// AllScopes in a stable order.
var AllScopes = []string{ScopeRead, ScopeControl, ScopeAdmin, ScopeCDP}

// Method says how a principal was authenticated.
const (
	MethodCookie = "cookie"
	MethodToken  = "token"
	MethodNone   = "none" // auth.mode none, loopback only
)

// Principal is an authenticated caller.
type Principal struct {
	User   string
	Role   Role
	Method string
	// TokenID names the API token used (MethodToken); never the secret.
	TokenID string
	// Scopes limit a token; nil for logins, which hold what the role allows.
	Scopes []string
	// MustChangePassword: the login may only change its password or log out.
	MustChangePassword bool
	// CSRF is the login's anti-forgery token (MethodCookie only).
	CSRF string
	// login is the handle of the panel login (MethodCookie only): not the
	// cookie, and kept when the cookie rotates. Live connections follow it.
	login string
}

// Has reports whether the principal may act within scope.
func (p Principal) Has(scope string) bool {
	if scope == ScopeAdmin && p.Role != RoleAdmin {
		return false
	}
	if (scope == ScopeControl || scope == ScopeCDP) && p.Role == RoleViewer {
		return false
	}
	if p.Method == MethodToken {
		return slices.Contains(p.Scopes, scope)
	}
	return true
}

// CanCreate reports whether the principal may open new sessions.
func (p Principal) CanCreate() bool { return p.Has(ScopeControl) }

// CanSee reports whether the principal may know a session exists and watch
// it: admins see all, others their own and those they are invited to.
func (p Principal) CanSee(owner string, invited bool) bool {
	if !p.Has(ScopeRead) {
		return false
	}
	return p.Role == RoleAdmin || p.User == owner || invited
}

// CanOperate reports whether the principal may drive a session (input,
// navigation, close, invitations): admins and the owner, never a viewer.
func (p Principal) CanOperate(owner string) bool {
	if !p.Has(ScopeControl) {
		return false
	}
	return p.Role == RoleAdmin || p.User == owner
}

// CanCDP reports whether the principal may attach a DevTools Protocol
// client to a session: whoever may operate it (the CDP client drives it)
// and also holds the cdp scope (the client can run script in the page).
func (p Principal) CanCDP(owner string) bool {
	return p.Has(ScopeCDP) && p.CanOperate(owner)
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal of a request, if it was authenticated.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}
