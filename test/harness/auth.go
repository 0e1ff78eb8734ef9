package harness

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// AdminPassword is the password Start gives the user admin.
const AdminPassword = "test admin password 1"

// AddUser adds (or replaces the password of) a user in an auth-local users
// file through the plugin's own CLI.
func AddUser(usersFile, name, role, password string) error {
	bin, err := Binaries()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, "auth-local"), "users", "--file", usersFile, "add", name, "--role", role, "--password-stdin")
	cmd.Stdin = strings.NewReader(password + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "already exists") {
		// A restart on the same users file: set the password again.
		cmd = exec.Command(filepath.Join(bin, "auth-local"), "users", "--file", usersFile, "passwd", name, "--password-stdin")
		cmd.Stdin = strings.NewReader(password + "\n")
		out, err = cmd.CombinedOutput()
	}
	if err != nil {
		return fmt.Errorf("auth-local users add %s: %v\n%s", name, err, out)
	}
	return nil
}

// trustCertificate makes Client trust the appliance's own certificate when
// it serves HTTPS (the generated one in its data dir).
func (a *Appliance) trustCertificate() error {
	if !strings.HasPrefix(a.URL, "https://") {
		return nil
	}
	certPEM, err := os.ReadFile(filepath.Join(a.DataDir, "tls-cert.pem"))
	if err != nil {
		return fmt.Errorf("read the appliance certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		return fmt.Errorf("the appliance certificate is not PEM")
	}
	a.Client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	return nil
}

// Login logs user in through the API and returns the login cookie and its
// CSRF token.
func (a *Appliance) Login(ctx context.Context, user, password string) (*http.Cookie, string, error) {
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/api/v1/auth/login", strings.NewReader(string(body)))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.Client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var out struct {
		OK   bool   `json:"ok"`
		CSRF string `json:"csrf"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || !out.OK {
		return nil, "", fmt.Errorf("login %s: HTTP %d (%v)", user, resp.StatusCode, err)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "tabcast_login" {
			return c, out.CSRF, nil
		}
	}
	return nil, "", fmt.Errorf("login %s: no cookie", user)
}

// CertSPKI is the base64 SHA-256 of the appliance certificate's public key,
// for Chromium's --ignore-certificate-errors-spki-list (trusting exactly
// this certificate in a test profile); "" over plain HTTP.
func (a *Appliance) CertSPKI() (string, error) {
	if !strings.HasPrefix(a.URL, "https://") {
		return "", nil
	}
	b, err := os.ReadFile(filepath.Join(a.DataDir, "tls-cert.pem"))
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("the appliance certificate is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:]), nil
}
