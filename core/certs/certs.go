// Package certs gives the appliance its HTTPS certificate: an operator's
// files, re-read when they change, or a self-signed ECDSA P-256 certificate
// generated at first start and kept across restarts.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// validity of a generated certificate. Browsers cap publicly trusted
// certificates at 398 days, but a self-signed one is trusted by hand (or
// by fingerprint) and is not subject to that; regenerating it would make
// every user trust it again.
const validity = 5 * 365 * 24 * time.Hour

// renewBefore: a generated certificate this close to expiry is replaced.
const renewBefore = 30 * 24 * time.Hour

// Hosts are the names and addresses the appliance is reached by: the host
// name, localhost, and every non-link-local interface address.
func Hosts() []string {
	out := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		out = append(out, h)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() || ipn.IP.IsLinkLocalMulticast() {
			continue
		}
		out = append(out, ipn.IP.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EnsureSelfSigned returns the paths of the generated certificate in dir,
// creating it (0600 key) when it is missing, unreadable or near expiry.
// created says whether it was made now. A certificate that does not cover
// every host in hosts is kept (users trust it by fingerprint); missing
// lists the hosts it lacks so the caller can say so.
func EnsureSelfSigned(dir string, hosts []string) (certFile, keyFile string, created bool, missing []string, err error) {
	certFile, keyFile = filepath.Join(dir, "tls-cert.pem"), filepath.Join(dir, "tls-key.pem")
	if c, err := load(certFile, keyFile); err == nil && time.Until(c.Leaf.NotAfter) > renewBefore {
		for _, h := range hosts {
			if c.Leaf.VerifyHostname(h) != nil {
				missing = append(missing, h)
			}
		}
		return certFile, keyFile, false, missing, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", false, nil, fmt.Errorf("certs: %w", err)
	}
	certPEM, keyPEM, err := Generate(hosts, time.Now())
	if err != nil {
		return "", "", false, nil, err
	}
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", false, nil, err
	}
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		return "", "", false, nil, err
	}
	return certFile, keyFile, true, nil, nil
}

// Generate makes a self-signed certificate for hosts (names and IPs).
func Generate(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: serial: %w", err)
	}
	name := "Tabcast appliance"
	if h, err := os.Hostname(); err == nil && h != "" {
		name = "Tabcast " + h
	}
	tpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Tabcast"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// Self-signed leaf: not a CA, so trusting it trusts nothing else.
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tpl.IPAddresses = append(tpl.IPAddresses, ip)
		} else if h != "" {
			tpl.DNSNames = append(tpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: sign: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// Fingerprint is the SHA-256 of a certificate's DER, as browsers show it
// (upper-case hex pairs joined by colons).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

// SPKIHash is base64(SHA-256(SubjectPublicKeyInfo)), the form Chromium's
// --ignore-certificate-errors-spki-list takes.
func SPKIHash(c *x509.Certificate) []byte {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return sum[:]
}

// Reloader serves a certificate from files and re-reads them when their
// modification time changes, so a renewed certificate needs no restart.
type Reloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modCert time.Time
	modKey  time.Time
}

// NewReloader loads the pair once; a bad pair is an error now.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is for tls.Config. If the files change into something
// unreadable, the last good certificate stays in use.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.get()
}

// Leaf is the certificate currently served.
func (r *Reloader) Leaf() *x509.Certificate {
	c, err := r.get()
	if err != nil {
		return nil
	}
	return c.Leaf
}

func (r *Reloader) get() (*tls.Certificate, error) {
	mc, errC := modTime(r.certFile)
	mk, errK := modTime(r.keyFile)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && (errC != nil || errK != nil || (mc.Equal(r.modCert) && mk.Equal(r.modKey))) {
		return r.cert, nil
	}
	c, err := load(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil
		}
		return nil, err
	}
	r.cert, r.modCert, r.modKey = c, mc, mk
	return c, nil
}

func modTime(path string) (time.Time, error) {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}, err
	}
	return st.ModTime(), nil
}

func load(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: load %s: %w", certFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certs: parse %s: %w", certFile, err)
		}
	}
	if time.Now().After(c.Leaf.NotAfter) {
		return nil, errors.New("certs: " + certFile + " has expired")
	}
	return &c, nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}
