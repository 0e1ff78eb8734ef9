// Package cli is the commands of the tabcast binary, one file each:
// `tabcast run` starts the appliance (package app), `tabcast doctor`
// checks the machine, `tabcast config` checks and prints the
// configuration, and the others manage users, tokens, backups, updates
// and drive sessions as an agent.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/config"
)

// The build's facts, set once by Main before any command runs.
var (
	// defaultConfig is the embedded config.default.yaml.
	defaultConfig []byte
	version       = "dev"
)

const usage = `tabcast — streamed, shared Chromium sessions for the LAN

Usage:
  tabcast run     [--config FILE] [--set key=value]... [--listen ADDR] [--log-level L]
  tabcast doctor  [--json] [config flags]
  tabcast config check [config flags]
  tabcast config print [config flags]
  tabcast users list|add|passwd|del ...   (local users: see tabcast users --help)
  tabcast tokens list|create|revoke ...    (API tokens: see tabcast tokens)
  tabcast browser COMMAND ...             (drive a session as an agent: see tabcast browser --help)
  tabcast mcp [--url URL] [--token-file F] (the agent tools as an MCP server on stdio)
  tabcast support-bundle [-o FILE] [--logs N] [config flags] (redacted diagnostics for support)
  tabcast backup  [-o FILE] [config flags]  (config, users, tokens, TLS, secrets)
  tabcast restore FILE [--dry-run] [--force] [--pubkey F] [--require-signed]
  tabcast update apply|status|wait-ready|verify|keygen|pubkey|pack ... (A/B updates: see tabcast update --help)
  tabcast firstboot apply|host-keys ...  (the image's unattended set-up: see tabcast firstboot --help)
  tabcast version
`

// Main runs the command in args and returns its exit code. version and
// defaults are the build's (main's -ldflags and embedded defaults).
func Main(args []string, buildVersion string, defaults []byte, stdout, stderr io.Writer) int {
	version, defaultConfig = buildVersion, defaults
	return realMain(args, stdout, stderr)
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "doctor":
		return cmdDoctor(args[1:], stdout, stderr)
	case "config":
		return cmdConfig(args[1:], stdout, stderr)
	case "users":
		return cmdUsers(args[1:], stdout, stderr)
	case "tokens":
		return cmdTokens(args[1:], stdout, stderr)
	case "browser":
		return cmdBrowser(args[1:], stdout, stderr)
	case "mcp":
		return cmdMCP(args[1:], os.Stdin, stdout, stderr)
	case "support-bundle":
		return cmdSupportBundle(args[1:], stdout, stderr)
	case "backup":
		return cmdBackup(args[1:], stdout, stderr)
	case "restore":
		return cmdRestore(args[1:], stdout, stderr)
	case "update":
		return cmdUpdate(args[1:], stdout, stderr)
	case "firstboot":
		return cmdFirstboot(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "tabcast", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "tabcast: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// loadConfig parses the config flags in args and loads the layered config.
// extra registers a command's own flags.
func loadConfig(name string, args []string, stderr io.Writer, extra func(*pflag.FlagSet)) (*config.Config, *pflag.FlagSet, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	config.AddFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	file, _ := fs.GetString("config")
	cfg, err := config.Load(config.Options{Defaults: defaultConfig, File: file, Environ: os.Environ(), Flags: fs})
	return cfg, fs, err
}

func printConfigError(w io.Writer, err error) {
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	fmt.Fprintln(w, "tabcast: configuration is not valid:")
	fmt.Fprintln(w, err)
}
