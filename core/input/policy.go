package input

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tabcast/tabcast/core/errcode"
	"golang.org/x/net/idna"
)

const (
	defaultMaxText = 1 << 20
	// maxURLLen bounds what CheckURL parses; Chromium's own limit is 2 MiB.
	maxURLLen = 64 << 10
	// resolveTimeout bounds the host name lookup of CheckURL; a lookup that
	// does not answer in time refuses the URL.
	resolveTimeout = 2 * time.Second
)

// Resolver looks host names up; *net.Resolver satisfies it. Tests inject a
// fake so that nothing leaves loopback.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy is what the appliance lets producers do to a page. It is enforced
// here, whatever the panel shows. Start from DefaultPolicy: zero sizes and
// bounds take the defaults, but a zero DenyPrivate really turns the
// private-range denial off.
type Policy struct {
	// BlockedShortcuts are refused with shortcut_blocked, e.g. "Ctrl+O",
	// "Ctrl+Shift+I", "F12". A rule matches when its modifiers are held
	// (extra modifiers do not escape it; Meta counts as Ctrl) and its key
	// matches the event's key or code.
	BlockedShortcuts []string
	// AllowRightClick lets the right button through (default true: headless
	// Chromium shows no native context menu, and pages with their own
	// context menus need it). The middle button is always refused: on Linux
	// it pastes Chromium's process-wide PRIMARY selection, which may hold
	// text selected in another session.
	AllowRightClick bool
	// AllowSchemes may be navigated to (default http, https). about:blank is
	// always allowed. data: is off by default; add "data" to allow it.
	// file, chrome, chrome-untrusted, chrome-extension, devtools,
	// view-source, javascript and filesystem are refused whatever this says.
	AllowSchemes []string
	// AllowHosts, when not empty, is the only hosts that may be navigated
	// to: host names ("example.com"), suffixes ("*.example.com" matches
	// subdomains only), IP literals or CIDR prefixes.
	AllowHosts []string
	// DenyHosts are refused; same syntax. CIDR entries also apply to the
	// addresses host names resolve to.
	DenyHosts []string
	// DenyPrivate refuses loopback, RFC 1918, CGNAT 100.64/10, link-local
	// 169.254/16 (cloud metadata), unspecified, multicast, reserved,
	// fc00::/7, fe80::/10 and IPv4 embedded in IPv6 forms of these, as IP
	// literals (including the numeric forms Chromium accepts, such as
	// http://2852039166/) and by resolving host names (fail closed, 2 s).
	DenyPrivate bool
	// AllowLoopbackHosts are exceptions to DenyPrivate (and to AllowHosts):
	// "127.0.0.1:8080", "localhost:3000", "[::1]:8080", or a host without a
	// port for any port. DenyHosts still apply.
	AllowLoopbackHosts []string
	// MaxText bounds text_insert and prompt answers, MaxClipboard
	// clipboard_write and copied text, in bytes (default 1 MiB each).
	MaxText      int
	MaxClipboard int
	// Viewport bounds; a viewport action is clamped into them.
	MinWidth, MinHeight, MaxWidth, MaxHeight int
	// Resolver looks host names up for DenyPrivate and CIDR DenyHosts
	// (default net.DefaultResolver).
	Resolver Resolver
}

// DefaultPolicy is the appliance's default.
func DefaultPolicy() Policy {
	return Policy{
		BlockedShortcuts: []string{"Ctrl+O", "Ctrl+S", "Ctrl+P", "Ctrl+Shift+I", "F12"},
		AllowRightClick:  true,
		AllowSchemes:     []string{"http", "https"},
		DenyPrivate:      true,
		MaxText:          defaultMaxText,
		MaxClipboard:     defaultMaxText,
		MinWidth:         320,
		MinHeight:        240,
		MaxWidth:         1920,
		MaxHeight:        1080,
	}
}

// hardDenied schemes open local files, browser internals or run script;
// no configuration lets them through.
var hardDenied = []string{
	"file", "chrome", "chrome-untrusted", "chrome-extension", "chrome-search", "chrome-error",
	"devtools", "view-source", "javascript", "filesystem",
}

// special schemes have an authority and a host (WHATWG "special").
var special = []string{"http", "https", "ws", "wss", "ftp"}

var errBlocked = errcode.New(errcode.NavigationBlocked, "navigation blocked by policy")

// CheckURL returns nil when raw may be navigated to, else an *errcode.Error
// with code navigation_blocked whose message never echoes the URL. The
// refused URL (without credentials or query) is logged at debug level only.
func (p Policy) CheckURL(ctx context.Context, raw string) error {
	c, err := p.compile()
	if err != nil {
		slog.Debug("navigation blocked: invalid policy", "err", err)
		return errBlocked
	}
	if reason := c.check(ctx, raw); reason != "" {
		slog.Debug("navigation blocked", "url", redactURL(raw), "reason", reason)
		return errBlocked
	}
	return nil
}

// compiled is a Policy with its lists parsed once.
type compiled struct {
	Policy
	shortcuts  []shortcut
	schemes    []string
	allow      hostList
	deny       hostList
	exceptions []exception
	resolver   Resolver
}

type hostList struct {
	names    []string // exact, lowercase ASCII
	suffixes []string // ".example.com"
	prefixes []netip.Prefix
}

type exception struct {
	host string     // lowercase name, or "" for an address
	addr netip.Addr // valid for an address
	port string     // "" = any
}

func (p Policy) compile() (*compiled, error) {
	d := DefaultPolicy()
	if p.MaxText <= 0 {
		p.MaxText = d.MaxText
	}
	if p.MaxClipboard <= 0 {
		p.MaxClipboard = d.MaxClipboard
	}
	if p.MinWidth <= 0 {
		p.MinWidth = d.MinWidth
	}
	if p.MinHeight <= 0 {
		p.MinHeight = d.MinHeight
	}
	if p.MaxWidth <= 0 {
		p.MaxWidth = d.MaxWidth
	}
	if p.MaxHeight <= 0 {
		p.MaxHeight = d.MaxHeight
	}
	if p.MinWidth > p.MaxWidth || p.MinHeight > p.MaxHeight {
		return nil, fmt.Errorf("input: policy: viewport bounds %dx%d..%dx%d are empty", p.MinWidth, p.MinHeight, p.MaxWidth, p.MaxHeight)
	}
	c := &compiled{Policy: p, resolver: p.Resolver}
	if c.resolver == nil {
		c.resolver = net.DefaultResolver
	}
	for _, s := range p.BlockedShortcuts {
		sc, err := parseShortcut(s)
		if err != nil {
			return nil, fmt.Errorf("input: policy: blocked shortcut %q: %w", s, err)
		}
		c.shortcuts = append(c.shortcuts, sc)
	}
	for _, s := range p.AllowSchemes {
		s = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), ":"))
		if s == "" {
			return nil, errors.New("input: policy: empty scheme")
		}
		c.schemes = append(c.schemes, s)
	}
	var err error
	if c.allow, err = parseHostList(p.AllowHosts); err != nil {
		return nil, fmt.Errorf("input: policy: allow hosts: %w", err)
	}
	if c.deny, err = parseHostList(p.DenyHosts); err != nil {
		return nil, fmt.Errorf("input: policy: deny hosts: %w", err)
	}
	for _, s := range p.AllowLoopbackHosts {
		ex, err := parseException(s)
		if err != nil {
			return nil, fmt.Errorf("input: policy: loopback exception %q: %w", s, err)
		}
		c.exceptions = append(c.exceptions, ex)
	}
	return c, nil
}

func parseHostList(entries []string) (hostList, error) {
	var l hostList
	for _, raw := range entries {
		s := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case strings.Contains(s, "/"):
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return l, fmt.Errorf("%q: %w", raw, err)
			}
			l.prefixes = append(l.prefixes, pfx.Masked())
		case strings.HasPrefix(s, "*."):
			name, err := canonicalName(s[2:])
			if err != nil {
				return l, fmt.Errorf("%q: %w", raw, err)
			}
			l.suffixes = append(l.suffixes, "."+name)
		default:
			if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
				a = a.Unmap()
				l.prefixes = append(l.prefixes, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			name, err := canonicalName(s)
			if err != nil {
				return l, fmt.Errorf("%q: %w", raw, err)
			}
			l.names = append(l.names, name)
		}
	}
	return l, nil
}

func (l hostList) empty() bool {
	return len(l.names) == 0 && len(l.suffixes) == 0 && len(l.prefixes) == 0
}

func (l hostList) matchName(name string) bool {
	if slices.Contains(l.names, name) {
		return true
	}
	for _, s := range l.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

func (l hostList) matchAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range l.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func parseException(s string) (exception, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return exception{}, errors.New("bad port")
		}
		port = strconv.Itoa(n)
	}
	host = strings.Trim(host, "[]")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return exception{}, errors.New("zoned address")
		}
		return exception{addr: a.Unmap(), port: port}, nil
	}
	name, err := canonicalName(host)
	if err != nil {
		return exception{}, err
	}
	return exception{host: name, port: port}, nil
}

// hostTarget is a URL's host after canonicalization.
type hostTarget struct {
	name string     // host name, "" for an address
	addr netip.Addr // valid for an IP literal
	port string     // effective port
}

// trimURL drops leading and trailing C0 controls and spaces, as Chromium
// does; navigate sends what check read.
func trimURL(raw string) string {
	return strings.TrimFunc(raw, func(r rune) bool { return r <= ' ' })
}

// check returns why raw is refused, or "".
func (c *compiled) check(ctx context.Context, raw string) string {
	if len(raw) > maxURLLen {
		return "too long"
	}
	// Chromium trims leading and trailing C0 controls and spaces and drops
	// tabs and newlines anywhere; refusing them avoids parsing differently.
	s := trimURL(raw)
	for i := 0; i < len(s); i++ {
		// Backslash is a path separator to Chromium and not to net/url.
		if b := s[i]; b <= ' ' || b == 0x7f || b == '\\' {
			return "control, space or backslash"
		}
	}
	if strings.EqualFold(s, "about:blank") {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "unparsable"
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "" {
		return "no scheme"
	}
	if slices.Contains(hardDenied, scheme) {
		return "scheme always denied"
	}
	if !slices.Contains(c.schemes, scheme) {
		return "scheme not allowed"
	}
	isSpecial := slices.Contains(special, scheme)
	if !isSpecial && u.Host == "" && !strings.HasPrefix(s[len(scheme)+1:], "//") {
		return "" // an allowed opaque scheme such as data:
	}
	if u.Opaque != "" || u.Host == "" {
		return "no host"
	}
	if u.User != nil {
		return "credentials in URL"
	}
	tg, reason := canonicalTarget(u, scheme)
	if reason != "" {
		return reason
	}
	return c.checkTarget(ctx, tg)
}

func (c *compiled) checkTarget(ctx context.Context, tg hostTarget) string {
	if tg.addr.IsValid() {
		if c.deny.matchAddr(tg.addr) {
			return "denied host"
		}
	} else if c.deny.matchName(tg.name) {
		return "denied host"
	}
	if c.isException(tg) {
		return ""
	}
	if !c.allow.empty() {
		if tg.addr.IsValid() && !c.allow.matchAddr(tg.addr) || !tg.addr.IsValid() && !c.allow.matchName(tg.name) {
			return "host not allowed"
		}
	}
	if tg.addr.IsValid() {
		if c.DenyPrivate && isPrivate(tg.addr) {
			return "private address"
		}
		return ""
	}
	if c.DenyPrivate && (tg.name == "localhost" || strings.HasSuffix(tg.name, ".localhost")) {
		return "private address" // Chromium resolves these itself
	}
	if !c.DenyPrivate && len(c.deny.prefixes) == 0 {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := c.resolver.LookupNetIP(rctx, "ip", tg.name)
	if err != nil || len(addrs) == 0 {
		return "host does not resolve"
	}
	for _, a := range addrs {
		if c.deny.matchAddr(a) {
			return "resolves to a denied address"
		}
		if c.DenyPrivate && isPrivate(a) {
			return "resolves to a private address"
		}
	}
	return ""
}

func (c *compiled) isException(tg hostTarget) bool {
	for _, ex := range c.exceptions {
		if ex.port != "" && ex.port != tg.port {
			continue
		}
		if ex.addr.IsValid() && tg.addr.IsValid() && ex.addr == tg.addr.Unmap() {
			return true
		}
		if ex.host != "" && ex.host == tg.name {
			return true
		}
	}
	return false
}

// canonicalTarget reads the host the way Chromium will: IDNA mapping,
// WHATWG IPv4 number forms, bracketed IPv6.
func canonicalTarget(u *url.URL, scheme string) (hostTarget, string) {
	tg := hostTarget{port: u.Port()}
	if tg.port == "" {
		tg.port = defaultPort(scheme)
	} else if n, err := strconv.Atoi(tg.port); err != nil || n > 65535 {
		return tg, "bad port"
	} else {
		tg.port = strconv.Itoa(n)
	}
	host := u.Hostname()
	if strings.ContainsAny(host, "%[]") {
		return tg, "escaped host"
	}
	if strings.HasPrefix(u.Host, "[") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return tg, "bad IPv6 literal"
		}
		tg.addr = a
		return tg, ""
	}
	name, err := canonicalName(host)
	if err != nil {
		return tg, "bad host name"
	}
	if a, isIP, ok := parseWHATWGIPv4(name); isIP {
		if !ok {
			return tg, "bad IPv4 literal"
		}
		tg.addr = a
		return tg, ""
	}
	tg.name = name
	return tg, ""
}

func defaultPort(scheme string) string {
	switch scheme {
	case "http", "ws":
		return "80"
	case "https", "wss":
		return "443"
	case "ftp":
		return "21"
	}
	return ""
}

var idnaProfile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(false))

// canonicalName lowercases a host name, maps non-ASCII through IDNA (which
// also folds full-width digits and dots) and drops one trailing dot.
func canonicalName(host string) (string, error) {
	h := strings.ToLower(host)
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 {
			a, err := idnaProfile.ToASCII(host)
			if err != nil {
				return "", fmt.Errorf("idna: %w", err)
			}
			h = strings.ToLower(a)
			break
		}
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return "", errors.New("empty or too long")
	}
	for i := 0; i < len(h); i++ {
		b := h[i]
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '.' || b == '_') {
			return "", errors.New("forbidden character")
		}
	}
	if strings.Contains(h, "..") || strings.HasPrefix(h, ".") {
		return "", errors.New("empty label")
	}
	return h, nil
}

// parseWHATWGIPv4 implements the URL standard's IPv4 parser: a host whose
// last label is a number is an IPv4 address in dotted, decimal, octal or
// hex parts ("0x7f.1", "2130706433", "0177.0.0.1"), or invalid.
func parseWHATWGIPv4(h string) (addr netip.Addr, isIP, ok bool) {
	parts := strings.Split(h, ".")
	if !isNumberish(parts[len(parts)-1]) {
		return netip.Addr{}, false, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, true, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, good := parseIPv4Number(p)
		if !good {
			return netip.Addr{}, true, false
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, true, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, true, false
	}
	v := last
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, true
}

// isNumberish is the URL standard's "ends in a number" test for one label.
func isNumberish(p string) bool {
	if p == "" {
		return false
	}
	if strings.Trim(p, "0123456789") == "" {
		return true
	}
	if len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X") {
		return strings.Trim(p[2:], "0123456789abcdefABCDEF") == ""
	}
	return false
}

func parseIPv4Number(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) >= 2 && p[0] == '0':
		p, base = p[1:], 8
	}
	n, err := strconv.ParseUint(p, base, 64)
	if err != nil || n > 0xffffffff {
		return 0, false
	}
	return n, true
}

var privateV4 = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"224.0.0.0/4", "240.0.0.0/4",
)

var privateV6 = mustPrefixes(
	"::/96", // unspecified, loopback and the deprecated IPv4-compatible form
	"64:ff9b:1::/48", "100::/64", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// isPrivate reports an address that is not a public unicast one, looking
// through IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms.
func isPrivate(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is4() {
		for _, p := range privateV4 {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, p := range privateV6 {
		if p.Contains(a) {
			return true
		}
	}
	b := a.As16()
	if netip.MustParsePrefix("64:ff9b::/96").Contains(a) {
		return isPrivate(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	if b[0] == 0x20 && b[1] == 0x02 {
		return isPrivate(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
	}
	return false
}

// redactURL keeps what helps an operator (scheme, host, a bounded path) and
// drops credentials, query and fragment.
func redactURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme == "" {
		return "(unparsable)"
	}
	if u.Opaque != "" {
		return u.Scheme + ":…" // data: and the like carry content, not an address
	}
	s := u.Scheme + "://" + u.Host + u.EscapedPath()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
