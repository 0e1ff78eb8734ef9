// Command auth-local is the Tabcast auth plugin for local users kept in a
// YAML file with argon2id password hashes.
package main

import (
	"github.com/tabcast/tabcast/auth-local/users"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/auth"
)

func main() {
	log := plugins.Logger(users.Name)
	log.Info("starting", "version", users.Version)
	plugins.Serve(auth.PluginSets(users.New(log)))
}
