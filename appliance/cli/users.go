package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
)

// cmdUsers manages local users: the auth-local plugin owns the users file
// and its format, so the command is its own (`auth-local users ...`), run
// from the configured plugins directory with the configured users file.
func cmdUsers(args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(config.Options{Defaults: defaultConfig, Environ: os.Environ()})
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	dir, err := app.PluginsDir(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast users:", err)
		return 1
	}
	full := []string{"users"}
	if usersFile, _ := cfg.AuthLocalFiles(); usersFile != "" {
		full = append(full, "--file", usersFile)
	}
	cmd := exec.Command(filepath.Join(dir, "auth-local"), append(full, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(stderr, "tabcast users:", err)
		return 1
	}
	return 0
}
