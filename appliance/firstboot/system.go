package firstboot

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
)

// Files written into the root, relative to it.
const (
	etcHostname   = "etc/hostname"
	etcHosts      = "etc/hosts"
	networkdFile  = "etc/systemd/network/70-tabcast-static.network" // sorts before 80-tabcast-dhcp.network: it wins
	chronySources = "etc/chrony/sources.d/tabcast.sources"
	sshEtcDir     = "etc/ssh/tabcast" // sshd_config.d/tabcast.conf points here
	sshAuthKeys   = "etc/ssh/tabcast/authorized_keys"
)

// hostKeyTypes are the host keys made for sshd (no RSA: slow to make, and
// every current client speaks ed25519 or ECDSA).
var hostKeyTypes = []string{"ed25519", "ecdsa"}

const generatedBy = "# Written at every boot by tabcast-system.service (tabcast firstboot apply)\n# from /etc/tabcast/%s; edits here are lost. See docs/operations.md.\n"

// Reapply writes the persisted settings into the root file system; it is
// idempotent (a file is only rewritten when its content differs) and runs
// at every boot, as an update brings a root without them. It returns the
// root files it wrote or removed. A part that fails does not stop the rest.
func Reapply(o Options) ([]string, error) {
	r := &reapplier{o: o}
	r.hostname()
	r.network()
	r.ntp()
	r.ssh()
	return r.changed, errors.Join(r.errs...)
}

type reapplier struct {
	o       Options
	changed []string
	errs    []error
}

func (r *reapplier) fail(err error) { r.errs = append(r.errs, err) }

// read returns a persisted setting; nil when it is not set.
func (r *reapplier) read(rel string) []byte {
	b, err := readTrusted(filepath.Join(r.o.State, rel))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", rel, err))
		return nil
	}
	return b
}

func (r *reapplier) put(rel string, data []byte, perm os.FileMode) {
	path := filepath.Join(r.o.Root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		r.fail(fmt.Errorf("create %s: %w", filepath.Dir(path), err))
		return
	}
	changed, err := writeFile(path, data, perm, nil)
	if err != nil {
		r.fail(err)
	} else if changed {
		r.changed = append(r.changed, "/"+rel)
	}
}

func (r *reapplier) del(rel string) {
	removed, err := removeFile(filepath.Join(r.o.Root, rel))
	if err != nil {
		r.fail(err)
	} else if removed {
		r.changed = append(r.changed, "/"+rel+" (removed)")
	}
}

func (r *reapplier) hostname() {
	b := r.read(hostnameFile)
	if b == nil {
		return // the image's name (tabcast)
	}
	name := strings.TrimSpace(string(b))
	if !validHostname(name) {
		r.fail(fmt.Errorf("%s: invalid host name %q", hostnameFile, name))
		return
	}
	r.put(etcHostname, []byte(name+"\n"), 0o644)
	hosts, err := os.ReadFile(filepath.Join(r.o.Root, etcHosts))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.fail(fmt.Errorf("read /%s: %w", etcHosts, err))
	} else {
		r.put(etcHosts, hostsWith(hosts, name), 0o644)
	}
	if h := r.o.Hooks.SetHostname; h != nil {
		if err := h(name); err != nil {
			r.fail(fmt.Errorf("set host name: %w", err))
		}
	}
}

// hostsWith sets the 127.0.1.1 line (Debian's own-name entry) to name.
func hostsWith(hosts []byte, name string) []byte {
	entry := "127.0.1.1\t" + name
	if short, _, ok := strings.Cut(name, "."); ok {
		entry += " " + short
	}
	if len(hosts) == 0 {
		hosts = []byte("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
	}
	lines := strings.Split(strings.TrimRight(string(hosts), "\n"), "\n")
	found := false
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "127.0.1.1" {
			lines[i], found = entry, true
		}
	}
	if !found {
		lines = append(lines, entry)
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}

func (r *reapplier) network() {
	b := r.read(networkFile)
	if b == nil {
		r.del(networkdFile) // DHCP: 80-tabcast-dhcp.network
		return
	}
	var n Network
	if err := yaml.Unmarshal(b, &n); err != nil {
		r.fail(fmt.Errorf("%s: %w", networkFile, err))
		return
	}
	if errs := n.validate(); len(errs) > 0 {
		r.fail(fmt.Errorf("%s: %w", networkFile, errors.Join(errs...)))
		return
	}
	r.put(networkdFile, []byte(renderNetwork(n)), 0o644)
}

func renderNetwork(n Network) string {
	var b strings.Builder
	fmt.Fprintf(&b, generatedBy, networkFile)
	b.WriteString("[Match]\n")
	if n.Interface != "" {
		fmt.Fprintf(&b, "Name=%s\n", n.Interface)
	} else {
		// The ports 80-tabcast-dhcp.network would configure.
		b.WriteString("Type=ether\nName=en* eth*\n")
	}
	fmt.Fprintf(&b, "\n[Network]\nAddress=%s\n", n.Address)
	if n.Gateway != "" {
		fmt.Fprintf(&b, "Gateway=%s\n", n.Gateway)
	}
	for _, d := range n.DNS {
		fmt.Fprintf(&b, "DNS=%s\n", d)
	}
	b.WriteString("LinkLocalAddressing=ipv6\n")
	return b.String()
}

func (r *reapplier) ntp() {
	b := r.read(ntpFile)
	if b == nil {
		r.del(chronySources)
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, generatedBy, ntpFile)
	for _, s := range strings.Fields(string(b)) {
		if !validServer(s) {
			r.fail(fmt.Errorf("%s: invalid server %q", ntpFile, s))
			return
		}
		fmt.Fprintf(&out, "server %s iburst\n", s)
	}
	r.put(chronySources, []byte(out.String()), 0o644)
}

func (r *reapplier) ssh() {
	keys := r.read(authorizedKeys)
	if keys == nil {
		r.del(sshAuthKeys)
		return
	}
	for i, l := range strings.Split(strings.TrimSpace(string(keys)), "\n") {
		if err := checkAuthorizedKey(l); err != nil {
			r.fail(fmt.Errorf("%s: line %d: %w", authorizedKeys, i+1, err))
			return
		}
	}
	changed, err := HostKeys(r.o)
	r.changed = append(r.changed, changed...)
	if err != nil {
		r.fail(err)
		return
	}
	r.put(sshAuthKeys, keys, 0o644)
	if h := r.o.Hooks.StartSSH; h != nil {
		if err := h(); err != nil {
			r.fail(fmt.Errorf("start sshd: %w", err))
		}
	}
}

// HostKeys makes the SSH host keys once, in the state dir (so they survive
// updates), and installs them where sshd reads them (/etc/ssh/tabcast). It
// returns the root files it wrote.
func HostKeys(o Options) ([]string, error) {
	dir := filepath.Join(o.State, sshDir)
	if err := trustedDir(dir); err != nil {
		return nil, err
	}
	r := &reapplier{o: o}
	if err := os.MkdirAll(filepath.Join(o.Root, sshEtcDir), 0o755); err != nil {
		return nil, fmt.Errorf("create /%s: %w", sshEtcDir, err)
	}
	for _, t := range hostKeyTypes {
		name := "ssh_host_" + t + "_key"
		priv, pub, err := hostKey(filepath.Join(dir, name), t)
		if err != nil {
			r.fail(err)
			continue
		}
		r.put(filepath.Join(sshEtcDir, name), priv, 0o600)
		r.put(filepath.Join(sshEtcDir, name+".pub"), pub, 0o644)
	}
	return r.changed, errors.Join(r.errs...)
}

// hostKey returns the key at path (OpenSSH format) and its public half,
// making both the first time.
func hostKey(path, typ string) (priv, pub []byte, err error) {
	priv, err = readTrusted(path)
	if err == nil {
		k, err := ssh.ParsePrivateKey(priv)
		if err != nil {
			return nil, nil, fmt.Errorf("host key %s: %w", path, err)
		}
		return priv, pubLine(k.PublicKey()), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	var key crypto.Signer
	switch typ {
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		err = fmt.Errorf("unknown key type %q", typ)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("make %s host key: %w", typ, err)
	}
	blk, err := ssh.MarshalPrivateKey(key, "root@tabcast")
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s host key: %w", typ, err)
	}
	sp, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s host key: %w", typ, err)
	}
	priv = pem.EncodeToMemory(blk)
	pub = pubLine(sp)
	if _, err := writeFile(path, priv, 0o600, nil); err != nil {
		return nil, nil, err
	}
	if _, err := writeFile(path+".pub", pub, 0o644, nil); err != nil {
		return nil, nil, err
	}
	return priv, pub, nil
}

func pubLine(k ssh.PublicKey) []byte {
	return append(bytes.TrimSpace(ssh.MarshalAuthorizedKey(k)), " root@tabcast\n"...)
}
