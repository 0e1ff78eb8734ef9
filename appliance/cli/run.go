package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
)

// cmdRun is `tabcast run`: the appliance (package app) until SIGINT or
// SIGTERM.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	cfg, _, err := loadConfig("run", args, stderr, nil)
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	log, level := app.NewLogger(stderr, cfg.Log.Level)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP re-reads the same layers (file, environment, flags).
	load := func() (*config.Config, error) {
		c, _, err := loadConfig("run", args, io.Discard, nil)
		return c, err
	}
	if err := app.Run(ctx, cfg, log, stdout, app.Options{Version: version, Load: load, Level: level}); err != nil {
		log.Error("tabcast stopped", "err", err)
		return 1
	}
	return 0
}
