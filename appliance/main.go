// Command tabcast is the Tabcast appliance: `tabcast run` serves the web
// panel and the API and supervises Chromium and the plugins; the other
// commands check, configure and maintain it (package cli; the start itself
// is package app).
package main

import (
	_ "embed"
	"os"

	"github.com/tabcast/tabcast/appliance/cli"
)

//go:embed config.default.yaml
var defaultConfig []byte

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	os.Exit(cli.Main(os.Args[1:], version, defaultConfig, os.Stdout, os.Stderr))
}
