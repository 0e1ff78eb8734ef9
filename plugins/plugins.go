// Package plugins is the Tabcast plugin SDK: the handshake every plugin and
// the host share, and Serve for plugin mains. The contracts of each plugin
// kind live in the sub-packages capture, encoder, auth and turn.
package plugins

import (
	"io"
	"log/slog"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Handshake is shared by host and plugins. It is not a security measure; it
// keeps a plugin binary that is run by hand from doing anything.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "TABCAST_PLUGIN",
	MagicCookieValue: "b6f1c1c4-tabcast-plugin",
}

// Kind names, also the keys under which plugins are dispensed.
const (
	KindCapture = "capture"
	KindEncoder = "encoder"
	KindAuth    = "auth"
	KindTurn    = "turn"
)

// Serve runs a plugin main. versioned maps each API version the plugin
// speaks to its plugin set (see the kind packages' PluginSets helpers). It
// returns when the host closes the plugin.
func Serve(versioned map[int]plugin.PluginSet) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versioned,
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger: hclog.New(&hclog.LoggerOptions{
			Output: os.Stderr, JSONFormat: true, Level: hclog.Info,
		}),
	})
}

// Logger is the structured logger plugins use: JSON lines on stderr, which
// the host's supervisor re-logs tagged with the plugin name.
func Logger(name string) *slog.Logger {
	return NewLogger(os.Stderr, name)
}

// NewLogger is Logger with an explicit writer (for tests).
func NewLogger(w io.Writer, name string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("plugin", name)
}

// Broken says whether err (or an error it wraps), returned by a call on a
// plugin client, means the plugin process is gone or hung, as opposed to
// the plugin refusing one request: gRPC Unavailable, DeadlineExceeded or
// Aborted. The host restarts a plugin on such an error.
func Broken(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}
