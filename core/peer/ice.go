package peer

import (
	"fmt"
	"log/slog"
	"net"
	"regexp"

	"github.com/pion/ice/v4"
	"github.com/pion/logging"
)

const iceMDNSDisabled = ice.MulticastDNSModeDisabled

// newUDPMux opens one UDP port on every allowed interface, loopback
// included, shared by every peer's ICE agent. IPv6 link-local addresses are
// left out: viewers on the LAN never need them, and on a fresh interface
// they cannot be bound until duplicate address detection ends. keepIP, if
// set, further limits the addresses (relay-only: loopback alone).
func newUDPMux(port int, filter func(string) bool, keepIP func(net.IP) bool, lf logging.LoggerFactory) (*ice.MultiUDPMuxDefault, error) {
	opts := []ice.UDPMuxFromPortOption{
		ice.UDPMuxFromPortWithLoopback(),
		ice.UDPMuxFromPortWithNetworks(ice.NetworkTypeUDP4, ice.NetworkTypeUDP6),
		ice.UDPMuxFromPortWithLogger(lf.NewLogger("udpmux")),
		ice.UDPMuxFromPortWithIPFilter(func(ip net.IP) bool {
			return !ip.IsLinkLocalUnicast() && (keepIP == nil || keepIP(ip))
		}),
	}
	if filter != nil {
		opts = append(opts, ice.UDPMuxFromPortWithInterfaceFilter(filter))
	}
	mux, err := ice.NewMultiUDPMuxFromPort(port, opts...)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return mux, nil
}

// pionLogs forwards Pion's warnings and errors to slog with ICE addresses
// and mDNS names masked: Pion's messages quote candidates, and the
// appliance never logs addresses. Info and below are dropped (per-packet
// noise).
type pionLogs struct{ log *slog.Logger }

func (f *pionLogs) NewLogger(scope string) logging.LeveledLogger {
	return pionLogger{log: f.log.With("scope", scope)}
}

type pionLogger struct{ log *slog.Logger }

var addrPattern = regexp.MustCompile(
	`\b(?:\d{1,3}\.){3}\d{1,3}\b|` + // IPv4
		`\[?[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}\]?|` + // IPv6
		`[0-9A-Za-z-]+\.local\b|` + // mDNS host names
		`candidate:\S+.*`) // candidate lines, whatever follows

func mask(s string) string { return addrPattern.ReplaceAllString(s, "[redacted]") }

func (l pionLogger) Trace(string)          {}
func (l pionLogger) Tracef(string, ...any) {}
func (l pionLogger) Debug(string)          {}
func (l pionLogger) Debugf(string, ...any) {}
func (l pionLogger) Info(string)           {}
func (l pionLogger) Infof(string, ...any)  {}
func (l pionLogger) Warn(msg string)       { l.log.Debug(mask(msg)) }
func (l pionLogger) Warnf(format string, args ...any) {
	l.log.Debug(mask(fmt.Sprintf(format, args...)))
}
func (l pionLogger) Error(msg string) { l.log.Warn(mask(msg)) }
func (l pionLogger) Errorf(format string, args ...any) {
	l.log.Warn(mask(fmt.Sprintf(format, args...)))
}
