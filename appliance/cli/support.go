package cli

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/plugins/atomicfile"
)

const supportUsage = `usage: tabcast support-bundle [-o FILE] [--logs N] [config flags]
Writes a .tar.gz (mode 0600) for a support request: the effective config
with secrets masked, the doctor report, versions, and the last N lines of
the tabcast.service journal and of the audit log. Every text is redacted
(addresses other than loopback, tokens, passwords, SDP); MANIFEST.txt says
what was removed. Read it before you send it.
`

// Support bundle limits; variables so that tests can shorten them.
var (
	supportDoctorTimeout  = 90 * time.Second
	supportJournalTimeout = 10 * time.Second
	supportBrowserTimeout = 5 * time.Second
	// supportJournal is the journal command; the line count is appended.
	supportJournal = []string{"journalctl", "--unit", "tabcast.service", "--no-pager", "--output", "short-iso", "--lines"}
)

func cmdSupportBundle(args []string, stdout, stderr io.Writer) int {
	var out string
	var lines int
	extra := func(fs *pflag.FlagSet) {
		fs.StringVarP(&out, "output", "o", "", "bundle file (default tabcast-support-<host>-<UTC time>.tar.gz here)")
		fs.IntVar(&lines, "logs", 2000, "journal and audit log lines to include (0 = none)")
	}
	if code, ok := parseCommandFlags("support-bundle", args, stderr, supportUsage, extra); !ok {
		return code
	}
	if lines < 0 {
		fmt.Fprintf(stderr, "tabcast support-bundle: --logs %d: want a number >= 0\n", lines)
		return 2
	}
	// A broken configuration is when support is needed most: note the
	// error and go on with the defaults for the paths.
	cfg, fs, cfgErr := loadConfig("support-bundle", args, io.Discard, extra)
	if cfgErr != nil {
		var err error
		if cfg, err = config.Load(config.Options{Defaults: defaultConfig}); err != nil {
			fmt.Fprintln(stderr, "tabcast support-bundle: built-in defaults:", err)
			return 1
		}
	}
	file, _ := fs.GetString(config.FlagConfig)
	now := time.Now().UTC()
	if out == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "unknown"
		}
		out = fmt.Sprintf("tabcast-support-%s-%s.tar.gz", safeName(host), now.Format("20060102T150405Z"))
	}
	sum, err := writeSupportBundle(context.Background(), out, cfg, cfgErr, file, lines, now)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast support-bundle:", err)
		return 1
	}
	fmt.Fprintf(stdout, "Wrote %s (%s). Read it before you send it: redaction is best effort.\n", out, sum)
	return 0
}

// parseCommandFlags parses args with the config flags and the command's own
// once, to tell usage errors (exit 2) from configuration errors. ok is
// false when the command must return code.
func parseCommandFlags(name string, args []string, stderr io.Writer, usage string, extra func(*pflag.FlagSet)) (code int, ok bool) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.AddFlags(fs)
	if extra != nil {
		extra(fs)
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stderr, usage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "tabcast %s: %v\n%s", name, err, usage)
		return 2, false
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "tabcast %s: unexpected arguments %q\n%s", name, fs.Args(), usage)
		return 2, false
	}
	return 0, true
}

// safeName keeps a host name usable in a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// writeSupportBundle collects, redacts and writes the bundle to out. It
// returns a one-line summary.
func writeSupportBundle(ctx context.Context, out string, cfg *config.Config, cfgErr error, cfgFile string, lines int, now time.Time) (string, error) {
	var notes []string
	note := func(format string, a ...any) { notes = append(notes, fmt.Sprintf(format, a...)) }

	var cfgText bytes.Buffer
	if cfgErr != nil {
		fmt.Fprintf(&cfgText, "# The configuration is not valid; the other files used the built-in defaults.\n%s\n",
			commentLines(cfgErr.Error()))
		note("the configuration is not valid: config.yaml holds the error, not the values")
	} else {
		src := "defaults"
		if cfgFile != "" {
			src = cfgFile
		} else if _, err := os.Stat(config.DefaultFilePath); err == nil {
			src = config.DefaultFilePath
		}
		fmt.Fprintf(&cfgText, "# Effective configuration (file: %s, plus TABCAST_* environment), secrets masked.\n", src)
		if err := config.Print(&cfgText, cfg); err != nil {
			return "", err
		}
	}

	var doctorText string
	if cfgErr != nil {
		doctorText = "not run: the configuration is not valid:\n" + cfgErr.Error() + "\n"
	} else {
		doctorText = captureDoctor(ctx, cfg, supportDoctorTimeout)
	}

	files := []struct{ name, text string }{
		{"config.yaml", cfgText.String()},
		{"doctor.txt", doctorText},
		{"versions.txt", supportVersions(ctx, cfg, note)},
		{"logs.txt", supportLogs(ctx, cfg, lines, note)},
	}

	dir := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(out), ".gz"), ".tar")
	dir = strings.TrimSuffix(dir, ".tgz")
	var entries []tarEntry
	var manifest strings.Builder
	fmt.Fprintf(&manifest, "Tabcast support bundle\ncreated: %s\ntabcast: %s\n\nfiles (sha256, bytes, name):\n", now.Format(time.RFC3339), version)
	var redactions strings.Builder
	total := 0
	for _, f := range files {
		r := newRedactor()
		text := r.redact(f.text)
		sum := sha256.Sum256([]byte(text))
		fmt.Fprintf(&manifest, "  %s  %8d  %s\n", hex.EncodeToString(sum[:]), len(text), f.name)
		fmt.Fprintf(&redactions, "  %s: %s\n", f.name, r.summary())
		total += r.total()
		entries = append(entries, tarEntry{name: dir + "/" + f.name, mode: 0o600, data: []byte(text)})
	}
	fmt.Fprintf(&manifest, "\nredacted (every file passed through the redaction; loopback and unspecified addresses are kept):\n%s", redactions.String())
	if len(notes) > 0 {
		manifest.WriteString("\nnotes:\n")
		for _, n := range notes {
			// Notes are the collector's own words, redacted like the rest.
			fmt.Fprintf(&manifest, "  - %s\n", newRedactor().redact(n))
		}
	}
	entries = append(entries, tarEntry{name: dir + "/MANIFEST.txt", mode: 0o600, data: []byte(manifest.String())})
	if err := writeTarGz(out, entries, now); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d files, %d redactions", len(entries), total), nil
}

func commentLines(s string) string {
	return "# " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n# ")
}

// captureDoctor runs the doctor's checks in-process and prints them as
// `tabcast doctor` does. It gives up waiting after timeout (plus a grace
// period for checks that do not watch the context).
func captureDoctor(ctx context.Context, cfg *config.Config, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errOut lockedBuffer
	done := make(chan []check, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				fmt.Fprintf(&errOut, "doctor panicked: %v\n", p)
				done <- nil
			}
		}()
		done <- doctor(ctx, cfg, &errOut)
	}()
	var b strings.Builder
	b.WriteString("ok   config: valid\n")
	select {
	case checks := <-done:
		for _, c := range checks {
			fmt.Fprintf(&b, "%-4s %s: %s\n", map[string]string{"ok": "ok", "warn": "info", "fail": "FAIL"}[c.Status], c.Name, c.Detail)
			if c.Hint != "" && c.Status != "ok" {
				fmt.Fprintf(&b, "       hint: %s\n", c.Hint)
			}
		}
	case <-time.After(timeout + 15*time.Second):
		fmt.Fprintf(&b, "FAIL doctor: did not finish within %s\n", timeout)
	}
	if s := errOut.String(); s != "" {
		b.WriteString("\n== doctor stderr ==\n" + s)
	}
	return b.String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// supportVersions lists the software versions and the plugin binaries.
func supportVersions(ctx context.Context, cfg *config.Config, note func(string, ...any)) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tabcast: %s\ngo: %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if out, err := runCommand(ctx, supportBrowserTimeout, "uname", "-srvm"); err != nil {
		fmt.Fprintf(&b, "kernel: unknown (%v)\n", err)
	} else {
		fmt.Fprintf(&b, "kernel: %s\n", strings.TrimSpace(out))
	}
	if osr, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(osr), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				fmt.Fprintf(&b, "os: %s\n", strings.Trim(v, `"`))
			}
		}
	}
	if _, err := os.Stat(cfg.Browser.Path); err != nil {
		fmt.Fprintf(&b, "chromium: not found at %s (browser.path): %v\n", cfg.Browser.Path, err)
	} else {
		pctx, cancel := context.WithTimeout(ctx, supportBrowserTimeout)
		v, err := browser.Probe(pctx, cfg.Browser.Path)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "chromium: %s: %v\n", cfg.Browser.Path, err)
		} else {
			fmt.Fprintf(&b, "chromium: %s (%s)\n", v, cfg.Browser.Path)
		}
	}
	dir, err := app.PluginsDir(cfg)
	if err != nil {
		fmt.Fprintf(&b, "plugins: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "plugins dir: %s\n", dir)
	// Only the configured plugins: plugins.dir may be /usr/bin.
	names := map[string]bool{cfg.Plugins.Capture: true, cfg.Plugins.Encoder: true, cfg.Turn.Plugin: true}
	if cfg.Auth.Mode != "none" {
		names[cfg.Auth.Plugin] = true
	}
	for n := range cfg.Plugins.SHA256 {
		names[n] = true
	}
	for n := range cfg.Plugins.Config {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		if n != "" && !strings.ContainsAny(n, `/\`) {
			sorted = append(sorted, n)
		}
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		path := filepath.Join(dir, n)
		size, sum, err := fileSHA256(path)
		if err != nil {
			fmt.Fprintf(&b, "plugin %s: %v\n", n, err)
			continue
		}
		pin := "not pinned"
		if want := cfg.Plugins.SHA256[n]; want != "" {
			pin = "matches plugins.sha256"
			if !strings.EqualFold(want, sum) {
				pin = "DOES NOT MATCH plugins.sha256 " + want
			}
		}
		fmt.Fprintf(&b, "plugin %s: %d bytes, sha256 %s (%s)\n", n, size, sum, pin)
	}
	return b.String()
}

func fileSHA256(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// runCommand runs a short command and returns its output (stdout+stderr).
func runCommand(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	if _, err := exec.LookPath(name); err != nil {
		return "", fmt.Errorf("%s: not found", name)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("%s: no answer within %s", name, timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %w", name, err)
	}
	return string(out), nil
}

// supportLogs is the tail of the journal and of the audit log.
func supportLogs(ctx context.Context, cfg *config.Config, lines int, note func(string, ...any)) string {
	var b strings.Builder
	if lines == 0 {
		note("logs left out (--logs 0)")
		return "logs left out (--logs 0)\n"
	}
	fmt.Fprintf(&b, "== journal: tabcast.service, last %d lines ==\n", lines)
	args := append(append([]string{}, supportJournal[1:]...), fmt.Sprint(lines))
	out, err := runCommand(ctx, supportJournalTimeout, supportJournal[0], args...)
	if err != nil {
		fmt.Fprintf(&b, "(not available: %v)\n", err)
		note("journal not included: %v", err)
	}
	b.WriteString(out)
	if out != "" && !strings.HasSuffix(out, "\n") {
		b.WriteString("\n")
	}
	path := filepath.Join(cfg.Server.DataDir, "audit.log")
	fmt.Fprintf(&b, "\n== audit log: %s, last %d lines ==\n", path, lines)
	// The rotated file first, so the tail spans a rotation.
	tail, err := tailLines([]string{path + ".1", path}, lines)
	if err != nil {
		fmt.Fprintf(&b, "(not available: %v)\n", err)
		note("audit log not included: %v", err)
	}
	for _, l := range tail {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// tailLines returns the last n lines of the files read in order; files that
// do not exist are skipped, but at least the last one must exist.
func tailLines(paths []string, n int) ([]string, error) {
	ring := make([]string, 0, min(n, 4096))
	start := 0
	var lastErr error
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			if i == len(paths)-1 {
				lastErr = err
			}
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if len(ring) < n {
				ring = append(ring, sc.Text())
			} else {
				ring[start] = sc.Text()
				start = (start + 1) % n
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
	}
	return append(ring[start:], ring[:start]...), lastErr
}

// tarEntry is one regular file of an archive.
type tarEntry struct {
	name string
	mode int64
	data []byte
}

// writeTarGz writes the entries as a gzip'd tar to path, mode 0600,
// atomically. It refuses to replace an existing file.
func writeTarGz(path string, entries []tarEntry, mtime time.Time) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s already exists; choose another name with -o", path)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("archive %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return atomicfile.Write(path, buf.Bytes(), 0o600)
}

// redactor masks what must not leave the box. It counts what it did.
type redactor struct{ counts map[string]int }

func newRedactor() *redactor { return &redactor{counts: map[string]int{}} }

// Redaction kinds, in MANIFEST.txt order.
var redactionKinds = []string{"sdp lines", "bearer tokens", "api tokens", "secret values", "ip addresses"}

const secretKey = `[a-z0-9_.-]*(?:password|passwd|secret|token|credential|api[_-]?key|private[_-]?key)[a-z0-9_.-]*`

var (
	bearerRE = regexp.MustCompile(`(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=-]+`)
	apiTokRE = regexp.MustCompile(`\btct_[A-Za-z0-9_-]+`)
	// secretKVs are key=value, "key":"value" and a YAML-style line
	// "key: value" for secret-like key names (prose such as "agent token:
	// not created" is left alone); values that are file paths or already
	// masked stay.
	secretKVs = []*regexp.Regexp{
		regexp.MustCompile(`(?i)\b(` + secretKey + `)(=)([^\s"',;&]+)`),
		regexp.MustCompile(`(?i)"(` + secretKey + `)("\s*:\s*")([^"]*)`),
		regexp.MustCompile(`(?im)^[ \t-]*(` + secretKey + `)(:[ \t]+)([^\s#]+)`),
	}
	// addrRun is a candidate IPv4 / IPv6 address (with port, maybe).
	addrRun = regexp.MustCompile(`[0-9A-Fa-f:.]*[:.][0-9A-Fa-f:.]*`)
	// sdpMarks flag a line carrying SDP or ICE secrets.
	sdpMarks = []string{"a=candidate", "a=ice-pwd", "a=ice-ufrag", "a=fingerprint", `v=0\r\n`, `v=0\\r\\n`, "\"candidate:"}
)

func (r *redactor) redact(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if isSDPLine(l) {
			r.counts["sdp lines"]++
			lines[i] = "[sdp removed]"
			if strings.HasSuffix(l, "\n") {
				lines[i] += "\n"
			}
		}
	}
	s = strings.Join(lines, "")
	s = bearerRE.ReplaceAllStringFunc(s, func(m string) string {
		r.counts["bearer tokens"]++
		sub := bearerRE.FindStringSubmatch(m)
		return sub[1] + sub[2] + config.Mask
	})
	s = apiTokRE.ReplaceAllStringFunc(s, func(string) string {
		r.counts["api tokens"]++
		return "tct_" + config.Mask
	})
	for _, re := range secretKVs {
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			sub := re.FindStringSubmatchIndex(m)
			key, val := strings.ToLower(m[sub[2]:sub[3]]), m[sub[6]:sub[7]]
			if !secretValue(key, val) {
				return m
			}
			r.counts["secret values"]++
			return m[:sub[6]] + config.Mask + m[sub[7]:]
		})
	}
	return r.redactAddrs(s)
}

// secretValue tells whether val, the value of a secret-like key, is to be
// masked: file paths, durations of *TTL keys and masked values are not.
func secretValue(key, val string) bool {
	for _, suffix := range []string{"file", "path", "dir", "ttl", "s"} {
		if strings.HasSuffix(key, suffix) {
			return false
		}
	}
	return val != "" && !strings.HasPrefix(val, "/") && !strings.HasPrefix(val, config.Mask) &&
		!strings.HasPrefix(val, "tct_"+config.Mask) && val != `""`
}

func isSDPLine(l string) bool {
	t := strings.TrimSpace(l)
	if strings.HasPrefix(t, "v=0") || strings.HasPrefix(t, "candidate:") {
		return true
	}
	for _, m := range sdpMarks {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}

// redactAddrs replaces IP addresses other than loopback and unspecified
// ones with <ip>, keeping a port that follows.
func (r *redactor) redactAddrs(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range addrRun.FindAllStringIndex(s, -1) {
		start, end, ok := findAddr(s, m[0], m[1])
		if !ok {
			continue
		}
		r.counts["ip addresses"]++
		b.WriteString(s[last:start])
		b.WriteString("<ip>")
		last = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// findAddr finds a redactable address in the run s[start:end]: the whole
// run, or the run without leading or trailing punctuation, each with or
// without a trailing :port. It must not be glued to a word.
func findAddr(s string, start, end int) (int, int, bool) {
	isWord := func(i int) bool {
		if i < 0 || i >= len(s) {
			return false
		}
		c := s[i]
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	trimStart, trimEnd := start, end
	for trimStart < end && (s[trimStart] == ':' || s[trimStart] == '.') {
		trimStart++
	}
	for trimEnd > trimStart && (s[trimEnd-1] == ':' || s[trimEnd-1] == '.') {
		trimEnd--
	}
	for _, c := range [][2]int{{start, end}, {trimStart, end}, {start, trimEnd}, {trimStart, trimEnd}} {
		a, z := c[0], c[1]
		if a >= z || isWord(a-1) || isWord(z) {
			continue
		}
		cand := s[a:z]
		if addr, err := netip.ParseAddr(cand); err == nil {
			return a, z, redactableAddr(addr)
		}
		// host:port without brackets (IPv4 only: for IPv6 it is ambiguous).
		if i := strings.LastIndexByte(cand, ':'); i > 0 && isDigits(cand[i+1:]) {
			if addr, err := netip.ParseAddr(cand[:i]); err == nil && addr.Is4() {
				return a, a + i, redactableAddr(addr)
			}
		}
	}
	return 0, 0, false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func redactableAddr(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsLoopback() && !a.IsUnspecified()
}

func (r *redactor) total() int {
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

func (r *redactor) summary() string {
	var parts []string
	for _, k := range redactionKinds {
		if c := r.counts[k]; c > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, c))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
