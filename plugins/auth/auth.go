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

// Authenticator is implemented by auth plugins and by the host's client shim.
type Authenticator interface {
	base.Plugin
	Authenticate(ctx context.Context, r Request) (Result, error)
}
