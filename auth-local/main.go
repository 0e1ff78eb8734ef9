// Command auth-local is the Tabcast auth plugin for local users kept in a
// YAML file with argon2id password hashes. Run by the core it serves the
// plugin protocol; `auth-local users ...` (what `tabcast users` runs)
// manages the users file.
package main

import (
	"os"

	"github.com/tabcast/tabcast/auth-local/users"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/auth"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "users" {
		os.Exit(usersCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	log := plugins.Logger(users.Name)
	log.Info("starting", "version", users.Version)
	plugins.Serve(auth.PluginSets(users.New(log)))
}
