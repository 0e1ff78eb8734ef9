// Command capture-cdp is the Tabcast capture plugin that streams a Chromium
// tab as JPEG frames from the DevTools screencast.
package main

import (
	"github.com/tabcast/tabcast/capture-cdp/screencast"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/capture"
)

func main() {
	log := plugins.Logger(screencast.Name)
	log.Info("starting", "version", screencast.Version)
	plugins.Serve(capture.PluginSets(screencast.New(log)))
}
