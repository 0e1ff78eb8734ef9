package relay

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// Config is the plugin's config subtree.
type Config struct {
	// ListenUDP, ListenTCP and ListenTLS are the TURN listeners ("host:port";
	// "" turns one off; at least one is on).
	ListenUDP string `json:"listenUDP"`
	ListenTCP string `json:"listenTCP"`
	ListenTLS string `json:"listenTLS"`
	// CertFile and KeyFile serve ListenTLS; they are re-read when their
	// modification time changes.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	Realm    string `json:"realm"`
	// RelayAddress is the IPv4 address relays bind to and advertise; ""
	// means the host's first non-loopback IPv4 address.
	RelayAddress string `json:"relayAddress"`
	RelayPortMin int    `json:"relayPortMin"`
	RelayPortMax int    `json:"relayPortMax"`
	// SecretFile holds the HMAC secret (generated on first start, 0600).
	SecretFile string `json:"secretFile"`
	// PreviousSecretFile, when set, holds the secret before a rotation;
	// credentials minted with it keep working until it is unset or removed.
	PreviousSecretFile string `json:"previousSecretFile"`
	// AdvertisedHosts are the hosts put into credential URLs; empty means
	// the relay address.
	AdvertisedHosts []string `json:"advertisedHosts"`
	// SelfAddresses and SelfPorts are the appliance's own media addresses
	// and ICE ports: the only peers a relay may reach (with AllowPeers).
	SelfAddresses []string `json:"selfAddresses"`
	SelfPorts     []int    `json:"selfPorts"`
	// AllowPeers are extra public peers: CIDRs (any port) or ip:port.
	AllowPeers []string `json:"allowPeers"`

	MaxAllocationsPerUser  int    `json:"maxAllocationsPerUser"`
	MaxAllocations         int    `json:"maxAllocations"`
	RelayKbpsPerAllocation int    `json:"relayKbpsPerAllocation"`
	RelayKbpsTotal         int    `json:"relayKbpsTotal"`
	AllocationLifetime     string `json:"allocationLifetime"`
	SocketBuffer           int    `json:"socketBuffer"`
}

// DefaultConfig is the config when a key is absent.
func DefaultConfig() Config {
	return Config{
		ListenUDP:              ":3478",
		ListenTCP:              ":3478",
		Realm:                  "tabcast",
		RelayPortMin:           49160,
		RelayPortMax:           49400,
		SecretFile:             "/var/lib/tabcast/turn-secret",
		AdvertisedHosts:        []string{},
		SelfAddresses:          []string{},
		SelfPorts:              []int{},
		AllowPeers:             []string{},
		MaxAllocationsPerUser:  5,
		MaxAllocations:         100,
		RelayKbpsPerAllocation: 20000,
		RelayKbpsTotal:         200000,
		AllocationLifetime:     "10m",
		SocketBuffer:           4 << 20,
	}
}

// settings is a validated Config in the types the server uses.
type settings struct {
	Config
	relayIP  netip.Addr
	lifetime time.Duration
	policy   *peerPolicy
}

func cerr(key, format string, args ...any) error {
	return &base.ConfigError{Key: key, Message: fmt.Sprintf(format, args...)}
}

func validListen(key, v string) error {
	if v == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return cerr(key, "not host:port: %q", v)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return cerr(key, "host must be an IP address or empty: %q", host)
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return cerr(key, "bad port: %q", port)
	}
	return nil
}

func (c Config) validate() (*settings, error) {
	s := &settings{Config: c}
	for _, kv := range [][2]string{{"listenUDP", c.ListenUDP}, {"listenTCP", c.ListenTCP}, {"listenTLS", c.ListenTLS}} {
		if err := validListen(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	if c.ListenUDP == "" && c.ListenTCP == "" && c.ListenTLS == "" {
		return nil, cerr("listenUDP", "all listeners are off: set listenUDP, listenTCP or listenTLS")
	}
	if c.ListenTLS != "" {
		if strings.TrimSpace(c.CertFile) == "" {
			return nil, cerr("certFile", "required when listenTLS is set")
		}
		if strings.TrimSpace(c.KeyFile) == "" {
			return nil, cerr("keyFile", "required when listenTLS is set")
		}
	}
	if strings.TrimSpace(c.Realm) == "" || strings.ContainsAny(c.Realm, "\"\\\r\n") || len(c.Realm) > 127 {
		return nil, cerr("realm", "must be 1..127 characters without quotes, backslashes or newlines")
	}
	if c.RelayAddress == "" {
		ip, err := firstIPv4()
		if err != nil {
			return nil, cerr("relayAddress", "empty and %v; set it", err)
		}
		s.relayIP = ip
	} else {
		ip, err := netip.ParseAddr(c.RelayAddress)
		if err != nil || !ip.Unmap().Is4() || ip.IsUnspecified() || ip.IsMulticast() {
			return nil, cerr("relayAddress", "not a unicast IPv4 address: %q", c.RelayAddress)
		}
		s.relayIP = ip.Unmap()
	}
	if err := base.Range("relayPortMin", c.RelayPortMin, 1024, 65535); err != nil {
		return nil, err
	}
	if err := base.Range("relayPortMax", c.RelayPortMax, c.RelayPortMin, 65535); err != nil {
		return nil, err
	}
	if strings.TrimSpace(c.SecretFile) == "" {
		return nil, cerr("secretFile", "must not be empty")
	}
	if c.PreviousSecretFile != "" && c.PreviousSecretFile == c.SecretFile {
		return nil, cerr("previousSecretFile", "must differ from secretFile")
	}
	for i, h := range c.AdvertisedHosts {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, "/?#@ :") && !isIPv6(h) {
			return nil, cerr("advertisedHosts", "entry %d is not a host name or IP: %q", i, h)
		}
	}
	pol, err := newPeerPolicy(c.SelfAddresses, c.SelfPorts, c.AllowPeers)
	if err != nil {
		return nil, err
	}
	s.policy = pol
	listenPorts := map[int]string{}
	for _, kv := range [][2]string{{"listenUDP", c.ListenUDP}, {"listenTCP", c.ListenTCP}, {"listenTLS", c.ListenTLS}} {
		if _, ps, err := net.SplitHostPort(kv[1]); err == nil {
			if n, _ := strconv.Atoi(ps); n != 0 {
				listenPorts[n] = kv[0]
			}
		}
	}
	for _, port := range c.SelfPorts {
		if port >= c.RelayPortMin && port <= c.RelayPortMax {
			return nil, cerr("selfPorts", "%d is in the relay port range: relays must not reach other relays", port)
		}
		if key, ok := listenPorts[port]; ok {
			return nil, cerr("selfPorts", "%d is the %s port: relays must not loop into the TURN server", port, key)
		}
	}
	if err := base.Range("maxAllocationsPerUser", c.MaxAllocationsPerUser, 1, 1000); err != nil {
		return nil, err
	}
	if err := base.Range("maxAllocations", c.MaxAllocations, 1, 10000); err != nil {
		return nil, err
	}
	if c.MaxAllocations > c.RelayPortMax-c.RelayPortMin+1 {
		return nil, cerr("maxAllocations", "%d is more than the relay port range holds (%d)", c.MaxAllocations, c.RelayPortMax-c.RelayPortMin+1)
	}
	if err := base.Range("relayKbpsPerAllocation", c.RelayKbpsPerAllocation, 64, 1000000); err != nil {
		return nil, err
	}
	if err := base.Range("relayKbpsTotal", c.RelayKbpsTotal, c.RelayKbpsPerAllocation, 10000000); err != nil {
		return nil, err
	}
	d, err := time.ParseDuration(c.AllocationLifetime)
	if err != nil {
		return nil, cerr("allocationLifetime", "not a duration: %q", c.AllocationLifetime)
	}
	if d < time.Second || d > time.Hour {
		return nil, cerr("allocationLifetime", "out of range: %v not in [1s, 1h]", d)
	}
	s.lifetime = d
	if err := base.Range("socketBuffer", c.SocketBuffer, 64<<10, 64<<20); err != nil {
		return nil, err
	}
	return s, nil
}

func isIPv6(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.Is6()
}

// firstIPv4 is the host's first non-loopback, non-link-local IPv4 address.
func firstIPv4() (netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("cannot list interfaces: %w", err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("the host has no non-loopback IPv4 address")
}

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "turnd",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "listenUDP": {"type": "string", "default": ":3478", "description": "TURN over UDP listener (ip:port or :port); empty turns it off."},
    "listenTCP": {"type": "string", "default": ":3478", "description": "TURN over TCP listener; empty turns it off."},
    "listenTLS": {"type": "string", "default": "", "description": "TURN over TLS (turns:) listener; empty turns it off. Needs certFile and keyFile."},
    "certFile": {"type": "string", "default": "", "description": "PEM certificate for listenTLS; reloaded when it changes."},
    "keyFile": {"type": "string", "default": "", "description": "PEM key for listenTLS; reloaded when it changes."},
    "realm": {"type": "string", "minLength": 1, "maxLength": 127, "default": "tabcast"},
    "relayAddress": {"type": "string", "default": "", "description": "IPv4 address relays bind to and advertise; empty = the host's first non-loopback IPv4."},
    "relayPortMin": {"type": "integer", "minimum": 1024, "maximum": 65535, "default": 49160},
    "relayPortMax": {"type": "integer", "minimum": 1024, "maximum": 65535, "default": 49400},
    "secretFile": {"type": "string", "minLength": 1, "default": "/var/lib/tabcast/turn-secret", "description": "HMAC secret; generated (32 random bytes, mode 0600) when missing."},
    "previousSecretFile": {"type": "string", "default": "", "description": "Secret before a rotation; its credentials work until this is unset or the file removed."},
    "advertisedHosts": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Hosts in the turn: URLs; empty = relayAddress."},
    "selfAddresses": {"type": "array", "items": {"type": "string"}, "default": [], "description": "The appliance's own media IPs: the only peers relays may reach. Empty = relays reach nothing."},
    "selfPorts": {"type": "array", "items": {"type": "integer"}, "default": [], "description": "The appliance's ICE (mux) ports on selfAddresses."},
    "allowPeers": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Extra public peers: CIDR (/16 or narrower for IPv4, /48 for IPv6) or ip:port. Loopback, private, link-local and other special addresses are never allowed here."},
    "maxAllocationsPerUser": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5},
    "maxAllocations": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 100},
    "relayKbpsPerAllocation": {"type": "integer", "minimum": 64, "maximum": 1000000, "default": 20000, "description": "Cap per allocation and direction; datagrams over it are dropped."},
    "relayKbpsTotal": {"type": "integer", "minimum": 64, "maximum": 10000000, "default": 200000, "description": "Cap over all allocations, per direction."},
    "allocationLifetime": {"type": "string", "default": "10m", "description": "Longest an allocation lives without a successfully authenticated request (Go duration, 1s..1h)."},
    "socketBuffer": {"type": "integer", "minimum": 65536, "maximum": 67108864, "default": 4194304, "description": "SO_RCVBUF/SO_SNDBUF of the UDP listener and relay sockets, bytes."}
  }
}`
