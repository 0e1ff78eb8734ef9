// Package auth is the contract of auth plugins: who is this person, and
// which roles do they hold. It is generic so that local users, LDAP and OIDC
// plugins can all implement it.
package auth

import (
	"context"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// APIVersions are the auth API versions this SDK speaks, newest last.
var APIVersions = []int{1}

// Stable error codes of a refused authentication.
const (
	CodeInvalidCredentials = "invalid_credentials"
	CodeRateLimited        = "rate_limited"
	CodeWeakPassword       = "weak_password"
	CodeNotSupported       = "not_supported"
)

// Request is one login attempt. Password is never logged.
type Request struct {
	Username string
	Password []byte
	SourceIP string
}

// Result of an attempt. When OK is false, ErrorCode says why, without
// revealing whether the user exists.
type Result struct {
	OK                 bool
	UserID             string
	Roles              []string
	MustChangePassword bool
	ErrorCode          string
	RetryAfter         time.Duration
}

// ChangeRequest changes a password. Passwords are never logged.
type ChangeRequest struct {
	Username    string
	OldPassword []byte
	NewPassword []byte
	SourceIP    string
}

// Authenticator is implemented by auth plugins and by the host's client shim.
type Authenticator interface {
	base.Plugin
	Authenticate(ctx context.Context, r Request) (Result, error)
	// ChangePassword checks the old password like Authenticate (same rate
	// limits) and sets the new one, clearing MustChangePassword. The result
	// describes the user after the change.
	ChangePassword(ctx context.Context, r ChangeRequest) (Result, error)
}
