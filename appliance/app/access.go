package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/certs"
	"github.com/tabcast/tabcast/core/httpapi"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/auth"
)

// auditMaxBytes rotates the audit log (one old file is kept).
const auditMaxBytes = 20 << 20

// gate is everything that decides who may use the appliance.
type gate struct {
	opts    httpapi.AuthOptions
	plugin  *supervisor.Handle // nil when auth.mode is none
	tlsConf *tls.Config        // nil when serving plain HTTP
	certFP  string             // SHA-256 fingerprint of the served certificate
	spki    []byte             // SHA-256 of its public key, for Chromium's trust flag
	cert    *certs.Reloader    // the served certificate; nil over plain HTTP
}

// TLSWanted applies server.tls: auto means HTTPS unless the listen host is
// loopback (browsers treat localhost as a secure context already).
func TLSWanted(cfg *config.Config) bool {
	switch cfg.Server.TLS {
	case "on":
		return true
	case "off":
		return false
	}
	host, _, _ := net.SplitHostPort(cfg.Server.Listen)
	return !config.IsLoopbackHost(host)
}

// AgentTokenFile is where the agent CLI finds its token.
func AgentTokenFile(cfg *config.Config) string {
	if cfg.Auth.AgentTokenFile != "" {
		return cfg.Auth.AgentTokenFile
	}
	return filepath.Join(cfg.Server.DataDir, "agent-token")
}

// openGate prepares auth (plugin, tokens, logins, audit) and TLS. It prints
// first-start facts (the one-time admin password, the certificate's
// fingerprint) on stdout, the console, and never in the log.
func openGate(ctx context.Context, cfg *config.Config, sup *supervisor.Supervisor, dir string, stdout io.Writer, log *slog.Logger) (*gate, error) {
	started := time.Now()
	if err := os.MkdirAll(cfg.Server.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("server.dataDir: %w", err)
	}
	al, err := audit.Open(filepath.Join(cfg.Server.DataDir, "audit.log"), auditMaxBytes)
	if err != nil {
		return nil, err
	}
	g := &gate{opts: httpapi.AuthOptions{None: cfg.Auth.Mode == "none", Audit: al, LoginMax: cfg.Auth.LoginMax}}
	if !g.opts.None {
		if g.plugin, err = StartPlugin(ctx, sup, cfg, dir, plugins.RoleAuth); err != nil {
			return nil, err
		}
		authn := supervisor.Dispense[auth.Authenticator](g.plugin)
		g.opts.Plugin = func(ctx context.Context) (auth.Authenticator, error) {
			a, _, err := authn.Get(ctx)
			return a, err
		}
		g.opts.Logins = access.NewLogins(cfg.Auth.LoginIdle, cfg.Auth.LoginMax)
		if g.opts.Tokens, err = access.OpenTokens(filepath.Join(cfg.Server.DataDir, "tokens.json")); err != nil {
			return nil, err
		}
		file := AgentTokenFile(cfg)
		created, err := g.opts.Tokens.EnsureFile(file, "agent CLI on the appliance", cfg.Sessions.DefaultOwner, access.RoleAdmin)
		if err != nil {
			return nil, fmt.Errorf("agent token: %w", err)
		}
		if created {
			log.Info("created the agent CLI token", "file", file)
		}
		printInitialPassword(cfg, started, stdout)
	}
	g.openGuard(ctx, cfg, log)
	if TLSWanted(cfg) {
		if err := g.openTLS(cfg, stdout); err != nil {
			g.close() // the guard's goroutine and the audit log
			return nil, err
		}
	}
	return g, nil
}

// openGuard starts the guard that ends live connections when access is
// withdrawn. With auth-local it reads the users file itself (the CLI
// changes it in another process), so that a user deleted, a password set
// or a role changed reaches the running appliance within a poll interval.
func (g *gate) openGuard(ctx context.Context, cfg *config.Config, log *slog.Logger) {
	o := access.GuardOptions{Tokens: g.opts.Tokens, Logins: g.opts.Logins, Logger: log.With("component", "access")}
	if !g.opts.None && cfg.Auth.Plugin == "auth-local" {
		if usersFile, _ := cfg.AuthLocalFiles(); usersFile != "" {
			o.Directory = access.NewFileDirectory(usersFile, parseAuthLocalUsers)
		}
	}
	g.opts.Guard = access.NewGuard(o)
	g.opts.Guard.Start(ctx)
	if o.Directory != nil && !g.opts.Guard.HasUser(cfg.Sessions.DefaultOwner) {
		log.Warn("sessions.defaultOwner is not a user: the agent CLI token acts as it and is refused", "owner", cfg.Sessions.DefaultOwner)
	}
}

// parseAuthLocalUsers reads auth-local's users file (auth-local/users owns
// the format: a YAML list of name, role, hash, must_change, updated). Only
// what access needs is kept: the role, and a fingerprint of the hash and
// its time as the credential, so a password set or reset is seen without
// the core holding the hash. Unknown fields are ignored (a newer plugin);
// a user with a role the core does not know holds no rights.
func parseAuthLocalUsers(b []byte) (map[string]access.UserRecord, error) {
	var f struct {
		Users []struct {
			Name    string    `yaml:"name"`
			Role    string    `yaml:"role"`
			Hash    string    `yaml:"hash"`
			Updated time.Time `yaml:"updated"`
		} `yaml:"users"`
	}
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse: %w", err)
	}
	out := make(map[string]access.UserRecord, len(f.Users))
	for _, u := range f.Users {
		role, ok := access.ParseRole(u.Role)
		if u.Name == "" || !ok {
			continue
		}
		h := sha256.Sum256([]byte(u.Hash + "\x00" + u.Updated.UTC().Format(time.RFC3339Nano)))
		out[u.Name] = access.UserRecord{Role: role, Credential: hex.EncodeToString(h[:12])}
	}
	return out, nil
}

// printInitialPassword shows the admin password the auth plugin made at
// this start, once, on the console.
func printInitialPassword(cfg *config.Config, started time.Time, stdout io.Writer) {
	if cfg.Auth.Plugin != "auth-local" {
		return
	}
	_, path := cfg.AuthLocalFiles()
	if path == "" {
		return
	}
	st, err := os.Stat(path)
	if err != nil || st.ModTime().Before(started.Add(-time.Second)) {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if stdoutIsJournal(stdout) {
		fmt.Fprintf(stdout, "First start: a one-time admin password is in %s (the appliance's console shows it; you must change it at the first login).\n", path)
		return
	}
	fmt.Fprintf(stdout, "First start: log in as admin with the one-time password %s (also in %s; you must change it at the first login).\n",
		strings.TrimSpace(string(b)), path)
}

// stdoutIsJournal: under systemd a service's stdout can be the journal
// (JOURNAL_STREAM names it by device and inode), which is a log that
// support bundles and log shippers read: a password must not go there.
func stdoutIsJournal(w io.Writer) bool {
	f, ok := w.(*os.File)
	js := os.Getenv("JOURNAL_STREAM")
	if !ok || js == "" {
		return false
	}
	var dev, ino uint64
	if _, err := fmt.Sscanf(js, "%d:%d", &dev, &ino); err != nil {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && uint64(sys.Dev) == dev && uint64(sys.Ino) == ino
}

func (g *gate) openTLS(cfg *config.Config, stdout io.Writer) error {
	certFile, keyFile := cfg.Server.CertFile, cfg.Server.KeyFile
	if certFile == "" {
		cf, kf, created, missing, err := certs.EnsureSelfSigned(cfg.Server.DataDir, certs.Hosts())
		if err != nil {
			return err
		}
		certFile, keyFile = cf, kf
		if created {
			fmt.Fprintf(stdout, "Generated a self-signed TLS certificate: %s\n", cf)
		}
		if len(missing) > 0 {
			fmt.Fprintf(stdout, "Note: the certificate does not name %s; delete %s to make a new one.\n", strings.Join(missing, ", "), cf)
		}
	}
	r, err := certs.NewReloader(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("server.certFile: %w", err)
	}
	leaf := r.Leaf()
	g.cert = r
	g.certFP, g.spki = certs.Fingerprint(leaf.Raw), certs.SPKIHash(leaf)
	fmt.Fprintf(stdout, "TLS certificate SHA-256 fingerprint: %s\n", g.certFP)
	g.tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	g.opts.Secure = true
	return nil
}

// certNames are the names the served certificate holds: the names the
// appliance is configured to answer to over HTTPS.
func (g *gate) certNames() []string {
	if g == nil || g.cert == nil {
		return nil
	}
	leaf := g.cert.Leaf()
	if leaf == nil {
		return nil
	}
	names := append([]string{}, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}

// redirector answers plain HTTP with a redirect to the HTTPS port. The
// Location names a host of names (the certificate's): the request's Host
// when it is one of them, else the first that is not loopback. A Host the
// box does not answer to never reaches the Location (it would make the
// listener an open redirect and a cache-poisoning tool).
func redirector(names func() []string, httpsPort string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		target := pickRedirectHost(names(), host)
		if target == "" {
			http.Error(w, "this listener only redirects to HTTPS, and the appliance has no name to redirect to", http.StatusMisdirectedRequest)
			return
		}
		if strings.Contains(target, ":") {
			target = "[" + target + "]"
		}
		target = "https://" + target
		if httpsPort != "443" {
			target += ":" + httpsPort
		}
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// pickRedirectHost is host when names holds it (any case), else the first
// name that is not loopback (a DNS name before an address), else the
// first name.
func pickRedirectHost(names []string, host string) string {
	for _, n := range names {
		if strings.EqualFold(n, host) {
			return n
		}
	}
	loopback := func(n string) bool {
		if ip := net.ParseIP(n); ip != nil {
			return ip.IsLoopback()
		}
		return strings.EqualFold(n, "localhost")
	}
	for _, dns := range []bool{true, false} {
		for _, n := range names {
			if !loopback(n) && (net.ParseIP(n) == nil) == dns {
				return n
			}
		}
	}
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

func (g *gate) close() {
	if g != nil {
		if g.opts.Guard != nil {
			g.opts.Guard.Close()
		}
		_ = g.opts.Audit.Close()
	}
}
