package firstboot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
)

// File is tabcast-firstboot.yaml. Pointers and yaml.Node tell an absent
// section (left as it is) from an empty one.
type File struct {
	Hostname          string    `yaml:"hostname"`
	Network           *Network  `yaml:"network"`
	NTP               *[]string `yaml:"ntp"`
	AdminPasswordHash string    `yaml:"adminPasswordHash"`
	SSH               *SSH      `yaml:"ssh"`
	Config            yaml.Node `yaml:"config"`
}

// Network is a static address on the Ethernet ports, or DHCP again.
type Network struct {
	Interface string   `yaml:"interface,omitempty"`
	Address   string   `yaml:"address,omitempty"`
	Gateway   string   `yaml:"gateway,omitempty"`
	DNS       []string `yaml:"dns,omitempty"`
	DHCP      bool     `yaml:"dhcp,omitempty"`
}

// SSH enables root login by key.
type SSH struct {
	AuthorizedKeys []string `yaml:"authorizedKeys"`
}

// knownKeys lists each section's keys: strictness with errors that name
// the key (yaml's own KnownFields names Go types).
var knownKeys = map[string][]string{
	"":        {"hostname", "network", "ntp", "adminPasswordHash", "ssh", "config"},
	"network": {"interface", "address", "gateway", "dns", "dhcp"},
	"ssh":     {"authorizedKeys"},
}

// Parse decodes and checks the file (not the config section against the
// appliance's schema: prepare does that, as it needs the current config).
// With an error, the returned File (when not nil) is the decodable part.
func Parse(data []byte) (*File, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the file must be a YAML mapping (hostname:, network:, ...)")
	}
	root := doc.Content[0]
	var errs []error
	checkKeys(root, "", &errs)
	var f File
	if err := root.Decode(&f); err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("wrong type: %w", err))...)
	}
	errs = append(errs, f.validate()...)
	// f is returned with its errors, so the caller can report more of them.
	return &f, errors.Join(errs...)
}

func checkKeys(m *yaml.Node, section string, errs *[]error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		path := joinKey(section, k.Value)
		if !slices.Contains(knownKeys[section], k.Value) {
			*errs = append(*errs, fmt.Errorf("line %d: unknown key %q", k.Line, path))
			continue
		}
		if _, sub := knownKeys[path]; sub && v.Kind == yaml.MappingNode {
			checkKeys(v, path, errs)
		}
	}
}

func joinKey(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

var (
	labelRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.*?-]{1,15}$`)
)

// validHostname is RFC 1123, within the kernel's 64-byte host name limit.
func validHostname(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !labelRE.MatchString(l) {
			return false
		}
	}
	return true
}

// validServer accepts an IP address or an RFC 1123 name: the value goes
// into a chrony config line, so nothing else may pass.
func validServer(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if len(s) > 253 || s == "" {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !labelRE.MatchString(l) {
			return false
		}
	}
	return true
}

func (f *File) validate() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if f.Hostname != "" && !validHostname(f.Hostname) {
		bad("hostname", "%q is not an RFC 1123 host name (letters, digits, '-', dot-separated labels, at most 64 characters)", f.Hostname)
	}
	if n := f.Network; n != nil {
		errs = append(errs, n.validate()...)
	}
	if f.NTP != nil {
		if len(*f.NTP) > 16 {
			bad("ntp", "at most 16 servers")
		}
		for i, s := range *f.NTP {
			if !validServer(s) {
				bad(fmt.Sprintf("ntp[%d]", i), "%q is not a host name or IP address", s)
			}
		}
	}
	if f.SSH != nil {
		for i, k := range f.SSH.AuthorizedKeys {
			if err := checkAuthorizedKey(k); err != nil {
				bad(fmt.Sprintf("ssh.authorizedKeys[%d]", i), "%v", err)
			}
		}
	}
	if f.Config.Kind != 0 && f.Config.Kind != yaml.MappingNode && !isNull(&f.Config) {
		bad("config", "must be a mapping of appliance config keys")
	}
	return errs
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func (n *Network) validate() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("network.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if n.DHCP {
		if n.Address != "" || n.Gateway != "" || len(n.DNS) > 0 {
			bad("dhcp", "true cannot be combined with address, gateway or dns")
		}
	} else if n.Address == "" {
		bad("address", "required (a static address in CIDR form, e.g. 192.168.10.20/24; omit network: for DHCP)")
	}
	if n.Interface != "" && !ifaceRE.MatchString(n.Interface) {
		bad("interface", "%q is not an interface name or pattern (e.g. enp1s0, en*)", n.Interface)
	}
	var pfx netip.Prefix
	if n.Address != "" {
		var err error
		pfx, err = netip.ParsePrefix(n.Address)
		switch {
		case err != nil:
			bad("address", "%q is not an address in CIDR form (e.g. 192.168.10.20/24)", n.Address)
		case pfx.Addr().IsUnspecified() || pfx.Addr().IsMulticast() || pfx.Addr().IsLoopback():
			bad("address", "%q is not a host address", n.Address)
		}
	}
	if n.Gateway != "" {
		gw, err := netip.ParseAddr(n.Gateway)
		switch {
		case err != nil:
			bad("gateway", "%q is not an IP address", n.Gateway)
		case pfx.IsValid() && gw.Is4() != pfx.Addr().Is4():
			bad("gateway", "%q is not of the address's family", n.Gateway)
		}
	}
	for i, d := range n.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			bad("dns["+strconv.Itoa(i)+"]", "%q is not an IP address", d)
		}
	}
	return errs
}

// checkAuthorizedKey accepts one authorized_keys line (options allowed).
// Its errors never quote the key.
func checkAuthorizedKey(k string) error {
	if strings.ContainsAny(k, "\r\n") {
		return errors.New("one key per list entry (no line breaks)")
	}
	_, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(k))
	if err != nil {
		return errors.New("not an SSH public key in authorized_keys form (type base64 [comment])")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return errors.New("more than one key in one entry")
	}
	return nil
}
