// Command turnd is Tabcast's embedded TURN server plugin: it relays media
// for viewers that cannot reach the appliance directly, only to the
// appliance's own media ports, with short-lived credentials the core mints
// per peer. See package relay for the security model.
package main

import (
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/turn"
	"github.com/tabcast/tabcast/turnd/relay"
)

func main() {
	log := plugins.Logger(relay.Name)
	log.Info("starting", "version", relay.Version)
	plugins.Serve(turn.PluginSets(relay.New(log)))
}
