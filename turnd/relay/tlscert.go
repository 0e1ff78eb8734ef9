package relay

import (
	"crypto/tls"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves a certificate from files and reloads it when either
// file's modification time changes (checked at most once a second), so a
// renewed certificate is picked up without a restart. A failed reload keeps
// the previous certificate.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	certMod  time.Time
	keyMod   time.Time
	lastStat time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) mods() (time.Time, time.Time, error) {
	c, err := os.Stat(r.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	k, err := os.Stat(r.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return c.ModTime(), k.ModTime(), nil
}

// load reads both files. Caller holds r.mu or owns r.
func (r *certReloader) load() error {
	cm, km, err := r.mods()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert, r.certMod, r.keyMod = &cert, cm, km
	return nil
}

func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.lastStat) >= time.Second {
		r.lastStat = now
		cm, km, err := r.mods()
		if err == nil && (!cm.Equal(r.certMod) || !km.Equal(r.keyMod)) {
			if err := r.load(); err != nil {
				r.log.Warn("TLS certificate reload failed; keeping the previous one", "certFile", r.certFile, "err", err)
			} else {
				r.log.Info("TLS certificate reloaded", "certFile", r.certFile)
			}
		}
	}
	return r.cert, nil
}
