package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/appliance/update"
)

const updateUsage = `usage: tabcast update COMMAND ...
A/B root file system updates from signed bundles (docs/operations.md, "Updates (A/B)").

  tabcast update apply FILE [--pubkey F] [--esp DIR] [--slot-a DEV] [--slot-b DEV]
                       [--current auto|a|b] [--tries N]
      Verify FILE's signature, write its root file system into the slot that is
      not running, its kernel and initrd to the ESP, and a boot entry that makes
      the next boot start it. FILE "-" reads standard input.
  tabcast update status [--esp DIR] [--current auto|a|b]
      The running slot, each slot's boot entry, version and boot-count state,
      and what boots next.
  tabcast update wait-ready [--timeout 5m] [--fail-only-with-fallback] [config flags]
      Poll the appliance's /readyz (server.listen); exit 0 once it answers 200,
      1 on timeout. Run by tabcast-boot-check.service at boot.
  tabcast update verify FILE [--pubkey F]
      Check a bundle's signature and every checksum; write nothing.
  tabcast update keygen --out DIR [--comment TEXT]
      New ed25519 signing key: DIR/update-signing.key (0600, SECRET) and
      DIR/update.pub (goes into the image as /usr/share/tabcast/update.pub).
  tabcast update pubkey --key FILE
      Print the update.pub line of a signing key.
  tabcast update pack --key FILE --version V --rootfs ROOT.ext4 --kernel VMLINUZ
                      --initrd INITRD --out FILE
      Write a signed bundle (the image build does this: dist/*.tcupdate).

Exit codes: 0 done, 1 failed or refused (the message says what), 2 usage.
`

// Image defaults (image/README.md).
const (
	defaultPubKey = "/usr/share/tabcast/update.pub"
	defaultESP    = "/efi"
	defaultSlotA  = "/dev/disk/by-partlabel/tabcast-root-a"
	defaultSlotB  = "/dev/disk/by-partlabel/tabcast-root-b"
)

// Variables for tests.
var (
	updateCmdline     = "/proc/cmdline"
	updatePartUUIDDir = "/dev/disk/by-partuuid"
	readyPollEvery    = 2 * time.Second
)

func cmdUpdate(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, updateUsage)
		return 2
	}
	rest := args[1:]
	switch args[0] {
	case "apply":
		return cmdUpdateApply(rest, stdout, stderr)
	case "status":
		return cmdUpdateStatus(rest, stdout, stderr)
	case "wait-ready":
		return cmdUpdateWaitReady(rest, stdout, stderr)
	case "verify":
		return cmdUpdateVerify(rest, stdout, stderr)
	case "keygen":
		return cmdUpdateKeygen(rest, stdout, stderr)
	case "pubkey":
		return cmdUpdatePubkey(rest, stdout, stderr)
	case "pack":
		return cmdUpdatePack(rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, updateUsage)
		return 0
	}
	fmt.Fprintf(stderr, "tabcast update: unknown command %q\n\n%s", args[0], updateUsage)
	return 2
}

// updateFlags parses a subcommand's flags; nargs positional arguments are
// required. ok false: return code.
func updateFlags(name string, args []string, nargs int, stderr io.Writer, setup func(*pflag.FlagSet)) (fs *pflag.FlagSet, code int, ok bool) {
	fs = pflag.NewFlagSet("update "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	setup(fs)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stderr, updateUsage)
		return fs, 0, false
	case err != nil:
		fmt.Fprintf(stderr, "tabcast update %s: %v\n\n%s", name, err, updateUsage)
		return fs, 2, false
	case fs.NArg() != nargs:
		fmt.Fprintf(stderr, "tabcast update %s: want %d argument(s), got %q\n\n%s", name, nargs, fs.Args(), updateUsage)
		return fs, 2, false
	}
	return fs, 0, true
}

func updateFail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "tabcast update %s: %v\n", name, err)
	return 1
}

// slotFlags are the flags that locate slots and the ESP.
type slotFlags struct {
	esp, slotA, slotB, current, uuidA, uuidB string
}

func (s *slotFlags) add(fs *pflag.FlagSet, devices bool) {
	fs.StringVar(&s.esp, "esp", defaultESP, "where the ESP is mounted")
	fs.StringVar(&s.current, "current", "auto", "running slot: auto (tabcast.slot= on the kernel command line), a or b")
	if devices {
		fs.StringVar(&s.slotA, "slot-a", defaultSlotA, "slot A's device")
		fs.StringVar(&s.slotB, "slot-b", defaultSlotB, "slot B's device")
		fs.StringVar(&s.uuidA, "slot-a-partuuid", "", "slot A's PARTUUID (default: found in "+updatePartUUIDDir+")")
		fs.StringVar(&s.uuidB, "slot-b-partuuid", "", "slot B's PARTUUID (default: found in "+updatePartUUIDDir+")")
	}
}

func (s *slotFlags) options() update.Options {
	return update.Options{
		ESP:         s.esp,
		Slots:       map[string]string{"a": s.slotA, "b": s.slotB},
		PartUUIDs:   map[string]string{"a": strings.ToLower(s.uuidA), "b": strings.ToLower(s.uuidB)},
		PartUUIDDir: updatePartUUIDDir,
		Current:     s.current,
		Cmdline:     updateCmdline,
	}
}

func cmdUpdateApply(args []string, stdout, stderr io.Writer) int {
	var sf slotFlags
	var pub string
	var tries int
	fs, code, ok := updateFlags("apply", args, 1, stderr, func(fs *pflag.FlagSet) {
		sf.add(fs, true)
		fs.StringVar(&pub, "pubkey", defaultPubKey, "trusted public keys, one per line")
		fs.IntVar(&tries, "tries", 1, "boots the new slot gets to become ready before systemd-boot falls back (1..9)")
	})
	if !ok {
		return code
	}
	keys, err := update.LoadPublicKeys(pub)
	if err != nil {
		return updateFail(stderr, "apply", fmt.Errorf("%w; nothing was written", err))
	}
	file := fs.Arg(0)
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return updateFail(stderr, "apply", fmt.Errorf("%w; nothing was written", err))
		}
		defer f.Close()
		in = f
	}
	o := sf.options()
	o.Tries = tries
	o.Log = stdout
	res, err := update.Apply(in, keys, o)
	if err != nil {
		return updateFail(stderr, "apply", err)
	}
	fmt.Fprintf(stdout, "Slot %s now holds tabcast %s; the next boot starts it (entry %s, %d %s).\n",
		res.To, res.Manifest.Version, res.Entry, tries, plural(tries, "try", "tries"))
	fmt.Fprintf(stdout, "Reboot when convenient. If /readyz does not answer within 5 minutes of that boot, "+
		"tabcast-boot-check.service reboots and systemd-boot goes back to slot %s.\n", res.From)
	return 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func cmdUpdateStatus(args []string, stdout, stderr io.Writer) int {
	var sf slotFlags
	var asJSON bool
	if _, code, ok := updateFlags("status", args, 0, stderr, func(fs *pflag.FlagSet) {
		sf.add(fs, false)
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	}); !ok {
		return code
	}
	st, err := update.ReadStatus(sf.options())
	if err != nil {
		return updateFail(stderr, "status", err)
	}
	if asJSON {
		type jentry struct {
			Name, Slot, Version, State string
			Generation                 int
			Bad                        bool
		}
		out := struct {
			Current  string   `json:"current"`
			Next     string   `json:"next"`
			Fallback string   `json:"fallback"`
			Entries  []jentry `json:"entries"`
		}{Current: st.Current, Entries: []jentry{}}
		if st.Default != nil {
			out.Next = st.Default.Name
		}
		if fb := st.Fallback(); fb != nil {
			out.Fallback = fb.Name
		}
		for _, e := range st.Entries {
			out.Entries = append(out.Entries, jentry{e.Name, e.Slot, entryVersion(e), e.State(), e.Gen, e.Bad()})
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	if st.Current != "" {
		fmt.Fprintf(stdout, "running slot: %s\n", st.Current)
	} else {
		fmt.Fprintf(stdout, "running slot: unknown (%s)\n", st.CurrentErr)
	}
	for _, slot := range []string{"a", "b"} {
		es := st.SlotEntries(slot)
		if len(es) == 0 {
			fmt.Fprintf(stdout, "slot %s: no boot entry (empty, or an update did not finish)\n", slot)
			continue
		}
		for _, e := range es {
			fmt.Fprintf(stdout, "slot %s: tabcast %s, entry %s: %s\n", slot, entryVersion(e), e.Name, e.State())
		}
	}
	if st.Default != nil {
		fmt.Fprintf(stdout, "next boot: slot %s (%s)\n", orUnknown(st.Default.Slot), st.Default.Name)
	} else {
		fmt.Fprintf(stdout, "next boot: no entry matches %q\n", st.Pattern)
	}
	return 0
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// entryVersion is the tabcast version in an entry's version line
// (<gen>-<version>).
func entryVersion(e update.Entry) string {
	v := e.Version
	if e.Gen > 0 {
		if _, rest, ok := strings.Cut(v, "-"); ok {
			v = rest
		}
	}
	if v == "" {
		return "?"
	}
	return v
}

func cmdUpdateVerify(args []string, stdout, stderr io.Writer) int {
	var pub string
	fs, code, ok := updateFlags("verify", args, 1, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&pub, "pubkey", defaultPubKey, "trusted public keys, one per line")
	})
	if !ok {
		return code
	}
	keys, err := update.LoadPublicKeys(pub)
	if err != nil {
		return updateFail(stderr, "verify", err)
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return updateFail(stderr, "verify", err)
	}
	defer f.Close()
	m, signer, err := update.Verify(f, keys)
	if err != nil {
		return updateFail(stderr, "verify", err)
	}
	r := m.File(update.MemberRootFS)
	fmt.Fprintf(stdout, "%s: tabcast %s (created %s), signed by key %s; root file system %d bytes; every sha256 matches.\n",
		fs.Arg(0), m.Version, m.Created.Format(time.RFC3339), update.KeyID(signer.Key), r.UncompressedSize)
	return 0
}

func cmdUpdateKeygen(args []string, stdout, stderr io.Writer) int {
	var out, comment string
	if _, code, ok := updateFlags("keygen", args, 0, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&out, "out", "", "directory for update-signing.key and update.pub")
		fs.StringVar(&comment, "comment", "", "comment on the public key line")
	}); !ok {
		return code
	}
	if out == "" {
		fmt.Fprintf(stderr, "tabcast update keygen: --out DIR is required\n\n%s", updateUsage)
		return 2
	}
	priv, pub, err := update.GenerateKey(out, comment)
	if err != nil {
		return updateFail(stderr, "keygen", err)
	}
	keys, err := update.LoadPublicKeys(pub)
	if err != nil {
		return updateFail(stderr, "keygen", err)
	}
	fmt.Fprintf(stdout, "Wrote %s (0600, SECRET: it signs software for every appliance that trusts it) and %s (key id %s).\n",
		priv, pub, update.KeyID(keys[0].Key))
	return 0
}

func cmdUpdatePubkey(args []string, stdout, stderr io.Writer) int {
	var key, comment string
	if _, code, ok := updateFlags("pubkey", args, 0, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&key, "key", "", "signing key file")
		fs.StringVar(&comment, "comment", "", "comment on the line (default: tabcast-update <key id>)")
	}); !ok {
		return code
	}
	if key == "" {
		fmt.Fprintf(stderr, "tabcast update pubkey: --key FILE is required\n\n%s", updateUsage)
		return 2
	}
	sk, err := update.LoadPrivateKey(key)
	if err != nil {
		return updateFail(stderr, "pubkey", err)
	}
	pk := sk.Public().(ed25519.PublicKey)
	if comment == "" {
		comment = "tabcast-update " + update.KeyID(pk)
	}
	fmt.Fprint(stdout, update.FormatPublicKey(pk, comment))
	return 0
}

func cmdUpdatePack(args []string, stdout, stderr io.Writer) int {
	var o update.PackOptions
	var key string
	if _, code, ok := updateFlags("pack", args, 0, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&key, "key", "", "signing key file")
		fs.StringVar(&o.Version, "version", "", "the version the bundle installs")
		fs.StringVar(&o.RootFS, "rootfs", "", "root file system image (ext4)")
		fs.StringVar(&o.Kernel, "kernel", "", "kernel (vmlinuz)")
		fs.StringVar(&o.Initrd, "initrd", "", "initrd")
		fs.StringVar(&o.Out, "out", "", "bundle to write (must not exist)")
	}); !ok {
		return code
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"--key", key}, {"--version", o.Version}, {"--rootfs", o.RootFS},
		{"--kernel", o.Kernel}, {"--initrd", o.Initrd}, {"--out", o.Out}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "tabcast update pack: missing %s\n\n%s", strings.Join(missing, ", "), updateUsage)
		return 2
	}
	sk, err := update.LoadPrivateKey(key)
	if err != nil {
		return updateFail(stderr, "pack", err)
	}
	o.Key = sk
	if sde := os.Getenv("SOURCE_DATE_EPOCH"); sde != "" {
		var secs int64
		if _, err := fmt.Sscan(sde, &secs); err == nil {
			o.Created = time.Unix(secs, 0)
		}
	}
	m, err := update.Pack(o)
	if err != nil {
		return updateFail(stderr, "pack", err)
	}
	r := m.File(update.MemberRootFS)
	fmt.Fprintf(stdout, "Wrote %s: tabcast %s, root file system %d bytes (%d gzip'd), signed by key %s.\n",
		o.Out, m.Version, r.UncompressedSize, r.Size, update.KeyID(sk.Public().(ed25519.PublicKey)))
	return 0
}

func cmdUpdateWaitReady(args []string, stdout, stderr io.Writer) int {
	var timeout time.Duration
	var onlyFallback bool
	var sf slotFlags
	extra := func(fs *pflag.FlagSet) {
		fs.DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
		fs.BoolVar(&onlyFallback, "fail-only-with-fallback", false,
			"on timeout, fail only when the ESP has a good entry of the other slot to fall back to (else warn, exit 0)")
		sf.add(fs, false)
	}
	if code, ok := parseCommandFlags("update wait-ready", args, stderr, updateUsage, extra); !ok {
		return code
	}
	cfg, _, err := loadConfig("update wait-ready", args, io.Discard, extra)
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	u, client, err := readyClient(cfg)
	if err != nil {
		return updateFail(stderr, "wait-ready", err)
	}
	defer client.CloseIdleConnections()
	fmt.Fprintf(stdout, "waiting up to %s for %s\n", timeout, u)
	start := time.Now()
	deadline := start.Add(timeout)
	last := "no answer yet"
	for {
		ok, why := readyOnce(client, u)
		if ok {
			fmt.Fprintf(stdout, "ready: %s answered 200 after %s\n", u, time.Since(start).Round(time.Second))
			return 0
		}
		last = why
		if !time.Now().Add(readyPollEvery).Before(deadline) {
			break
		}
		time.Sleep(readyPollEvery)
	}
	err = fmt.Errorf("not ready after %s: %s", timeout, last)
	if onlyFallback {
		st, serr := update.ReadStatus(sf.options())
		if serr == nil && st.Fallback() == nil {
			fmt.Fprintf(stderr, "tabcast update wait-ready: WARNING: %v; no other slot to fall back to, so the boot is not failed\n", err)
			return 0
		}
		if serr == nil {
			err = fmt.Errorf("%w; failing the boot: systemd-boot falls back to %s", err, st.Fallback().Name)
		}
	}
	return updateFail(stderr, "wait-ready", err)
}

// readyClient is the /readyz URL at server.listen and a client for it.
// Over HTTPS it trusts exactly the appliance's own certificate (the one in
// server.certFile, or the generated one in server.dataDir), re-read at each
// connection: at the first boot it does not exist until the appliance
// made it.
func readyClient(cfg *config.Config) (string, *http.Client, error) {
	host, port, err := net.SplitHostPort(cfg.Server.Listen)
	if err != nil || port == "0" {
		return "", nil, fmt.Errorf("server.listen %q has no fixed port to poll", cfg.Server.Listen)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	tr := &http.Transport{Proxy: nil}
	scheme := "http"
	if app.TLSWanted(cfg) {
		scheme = "https"
		certFile := cfg.Server.CertFile
		if certFile == "" {
			certFile = filepath.Join(cfg.Server.DataDir, "tls-cert.pem")
		}
		tr.TLSClientConfig = &tls.Config{
			// The certificate is pinned below instead: it need not name
			// the loopback address.
			InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyPeerCertificate
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				return pinnedCert(certFile, raw)
			},
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/readyz", &http.Client{Timeout: 5 * time.Second, Transport: tr}, nil
}

// pinnedCert accepts the connection when the server's certificate is one
// of those in certFile.
func pinnedCert(certFile string, raw [][]byte) error {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("the appliance's certificate: %w", err)
	}
	if len(raw) == 0 {
		return errors.New("the server sent no certificate")
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" && bytes.Equal(blk.Bytes, raw[0]) {
			return nil
		}
	}
	return fmt.Errorf("the server's certificate is not the appliance's own (%s)", certFile)
}

// readyOnce asks /readyz once.
func readyOnce(c *http.Client, u string) (bool, string) {
	resp, err := c.Get(u)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusOK {
		return true, ""
	}
	return false, fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}
