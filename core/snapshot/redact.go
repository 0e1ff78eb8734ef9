package snapshot

import (
	"regexp"
	"strings"
)

// Redacted replaces secrets in snapshot text.
const (
	Redacted         = "[redacted]"
	RedactedPassword = "••••"
)

var tokenRes = []*regexp.Regexp{
	// JWT: three base64url segments, the first a JSON header.
	regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`),
	// API keys with a well-known prefix (sk-, pk_, ghp_, xoxb-, AKIA...).
	regexp.MustCompile(`\b(?:sk|pk|rk)[-_](?:[A-Za-z0-9]+[-_])*[A-Za-z0-9]{16,}`),
	regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|github_pat|glpat|xox[abpr])[-_][A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),
	// Bearer <anything long>.
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*`),
	// 32+ hex characters.
	regexp.MustCompile(`\b[0-9a-fA-F]{32,}\b`),
}

// longRun finds 32+ character base64/base64url runs; redactTokens keeps
// only those that look random (letters and digits mixed).
var longRun = regexp.MustCompile(`[A-Za-z0-9+/_-]{32,}={0,2}`)

// RedactTokens replaces token-like substrings (JWTs, API keys, long hex or
// base64 runs) of s with "[redacted]".
func RedactTokens(s string) string {
	if len(s) < 16 {
		return s
	}
	for _, re := range tokenRes {
		s = re.ReplaceAllString(s, Redacted)
	}
	return longRun.ReplaceAllStringFunc(s, func(m string) string {
		if looksRandom(m) {
			return Redacted
		}
		return m
	})
}

// looksRandom: digits and letters of both cases, or many digits mixed in,
// and no long plain words (a URL path like /a-very-long-slug-of-words stays).
func looksRandom(m string) bool {
	var lower, upper, digit int
	for _, r := range m {
		switch {
		case r >= 'a' && r <= 'z':
			lower++
		case r >= 'A' && r <= 'Z':
			upper++
		case r >= '0' && r <= '9':
			digit++
		}
	}
	if digit == 0 || lower+upper == 0 {
		return false // all digits (a number) or all letters (a word)
	}
	// A slug of words joined by - or _ has separators every few letters.
	seps := strings.Count(m, "-") + strings.Count(m, "_")
	if seps > len(m)/6 {
		return false
	}
	return (lower > 0 && upper > 0) || digit >= 6
}
