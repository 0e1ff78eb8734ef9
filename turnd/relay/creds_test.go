package relay

import (
	"context"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the TURN REST scheme
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v4"
	turnapi "github.com/tabcast/tabcast/plugins/turn"
)

// refusedAuth asserts that allocating with username/password fails with
// pion v4.1.4's answer to a refused credential: 400 Bad Request (its
// AuthHandler returning false and a failed MESSAGE-INTEGRITY check both
// answer 400; only the first, credential-less request gets 401), and that
// the server counted an auth failure.
func refusedAuth(t *testing.T, p *Plugin, username, password, what string) {
	t.Helper()
	before := status(t, p).AuthFailures
	tc, err := allocate(t, p.udpAddr(), username, password)
	tc.Close()
	if err == nil {
		t.Fatalf("%s: allocation succeeded, want refused", what)
	}
	if code := turnCode(err); code != 400 {
		t.Errorf("%s: error %v (code %d), want 400 (what pion v4.1.4 answers)", what, err, code)
	}
	if got := status(t, p).AuthFailures - before; got < 1 {
		t.Errorf("%s: auth failures rose by %d, want >= 1", what, got)
	}
	t.Logf("%s: refused with %v", what, err)
}

func TestCredentials(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	p := startPlugin(t, cfg)
	secretFile := cfg["secretFile"].(string)

	// The secret was generated: 0600, 32 random bytes as base64url text.
	fi, err := os.Stat(secretFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v; want mode 0600", fi, err)
	}
	secret := readSecret(t, secretFile)
	if raw, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(raw) != 32 {
		t.Fatalf("secret is not 32 bytes of base64url: %v", err)
	}

	scope := turnapi.Scope{User: "alice@example", Session: "sess-1", Peer: "peer-1", Generation: 3}
	cred, err := p.MintCredential(context.Background(), scope, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	exp, id, ok := parseUsername(cred.Username)
	if !ok || exp != cred.Expires.Unix() || time.Until(cred.Expires) > 2*time.Minute+time.Second || time.Until(cred.Expires) < 2*time.Minute-2*time.Second {
		t.Fatalf("username %q / expires %v do not match the ttl", cred.Username, cred.Expires)
	}
	for _, leak := range []string{"alice", "sess-1", "peer-1"} {
		if strings.Contains(cred.Username, leak) {
			t.Errorf("username %q leaks %q", cred.Username, leak)
		}
	}
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(cred.Username))
	if want := base64.StdEncoding.EncodeToString(mac.Sum(nil)); cred.Password != want {
		t.Errorf("password is not base64(HMAC-SHA1(secret, username))")
	}
	if len(cred.URLs) != 1 || cred.URLs[0] != "turn:"+p.udpAddr().String()+"?transport=udp" {
		t.Errorf("URLs = %v", cred.URLs)
	}
	t.Logf("username %q (id %s), urls %v", cred.Username, id, cred.URLs)

	if _, err := p.MintCredential(context.Background(), scope, 11*time.Minute); err == nil || !strings.Contains(err.Error(), "longer than the maximum") {
		t.Errorf("ttl 11m: %v, want refused", err)
	}
	if _, err := p.MintCredential(context.Background(), turnapi.Scope{User: "a", Session: "s"}, time.Minute); err == nil {
		t.Error("scope without peer accepted")
	}

	// A good credential works.
	tc := mustAllocate(t, p.udpAddr(), cred)
	tc.Close()

	// Wrong HMAC.
	refusedAuth(t, p, cred.Username, base64.StdEncoding.EncodeToString(make([]byte, 20)), "wrong HMAC")
	// Right HMAC for a username the plugin never minted (pion's own
	// generator with our secret): not in the live table.
	u, pw, _ := turn.GenerateLongTermTURNRESTCredentials(secret, "forged", time.Minute)
	refusedAuth(t, p, u, pw, "unknown id with a valid HMAC")
	// Expired: a live id with a past expiry and a valid HMAC.
	u, pw, _ = turn.GenerateLongTermTURNRESTCredentials(secret, id, -time.Minute)
	refusedAuth(t, p, u, pw, "expired username")
	// Really expired: minted for 1 s.
	short, err := p.MintCredential(context.Background(), turnapi.Scope{User: "bob", Session: "s", Peer: "p"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(short.Expires) + 1100*time.Millisecond)
	refusedAuth(t, p, short.Username, short.Password, "credential past its ttl")

	// Revoked: the live allocation is closed and the credential refused.
	tc = mustAllocate(t, p.udpAddr(), cred)
	defer tc.Close()
	if st := status(t, p); st.AllocationsActive != 1 {
		t.Fatalf("active allocations = %d, want 1", st.AllocationsActive)
	}
	rv, err := p.Revoke(context.Background(), scope)
	if err != nil || rv.Credentials != 1 || rv.Allocations != 1 {
		t.Fatalf("Revoke = %+v, %v; want 1 credential, 1 allocation", rv, err)
	}
	eventually(t, "the revoked allocation to close", func() bool { return status(t, p).AllocationsActive == 0 })
	refusedAuth(t, p, cred.Username, cred.Password, "revoked scope")
}

// TestRevokeGenerations: Revoke removes the generations up to the given one
// and leaves newer ones and other peers alone.
func TestRevokeGenerations(t *testing.T) {
	leakCheck(t)
	p := startPlugin(t, testConfig(t))
	ctx := context.Background()
	for g := range 3 {
		if _, err := p.MintCredential(ctx, turnapi.Scope{User: "u", Session: "s", Peer: "p", Generation: g}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.MintCredential(ctx, turnapi.Scope{User: "u", Session: "s", Peer: "other"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	rv, err := p.Revoke(ctx, turnapi.Scope{User: "u", Session: "s", Peer: "p", Generation: 1})
	if err != nil || rv.Credentials != 2 {
		t.Fatalf("Revoke gen<=1 = %+v, %v; want 2", rv, err)
	}
	if n := status(t, p).CredentialsLive; n != 2 {
		t.Fatalf("live credentials = %d, want 2", n)
	}
}

// TestSecretRotation: a credential minted under the previous secret works
// while previousSecretFile is configured, and stops when it is unset or the
// file is removed; new credentials use the new secret.
func TestSecretRotation(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	p := startPlugin(t, cfg)
	secretFile := cfg["secretFile"].(string)
	prevFile := filepath.Join(filepath.Dir(secretFile), "turn-secret.prev")

	old := mint(t, p, "alice", "p1")
	// Rotate: the old secret moves to prevFile, a new one is generated.
	if err := os.Rename(secretFile, prevFile); err != nil {
		t.Fatal(err)
	}
	cfg["previousSecretFile"] = prevFile
	if err := p.SetConfig(context.Background(), mustJSON(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if readSecret(t, secretFile) == readSecret(t, prevFile) {
		t.Fatal("no new secret generated")
	}
	fresh := mint(t, p, "alice", "p2")
	for name, c := range map[string]turnapi.Credential{"old": old, "fresh": fresh} {
		tc, err := allocate(t, p.udpAddr(), c.Username, c.Password)
		tc.Close()
		if err != nil {
			t.Fatalf("%s credential during the overlap: %v", name, err)
		}
	}

	// Previous secret unset: old credentials stop working.
	delete(cfg, "previousSecretFile")
	if err := p.SetConfig(context.Background(), mustJSON(t, cfg)); err != nil {
		t.Fatal(err)
	}
	refusedAuth(t, p, old.Username, old.Password, "old secret after unset")
	tc := mustAllocate(t, p.udpAddr(), fresh)
	tc.Close()

	// Same with the file removed while configured.
	cfg["previousSecretFile"] = prevFile
	if err := p.SetConfig(context.Background(), mustJSON(t, cfg)); err != nil {
		t.Fatal(err)
	}
	tc = mustAllocate(t, p.udpAddr(), old)
	tc.Close()
	if err := os.Remove(prevFile); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // secret files are re-checked once a second
	refusedAuth(t, p, old.Username, old.Password, "old secret after its file was removed")
}
