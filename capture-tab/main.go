// Command capture-tab is the Tabcast capture plugin that streams a Chromium
// tab as browser-encoded VP8 through an embedded tab-capture extension.
package main

import (
	"github.com/tabcast/tabcast/capture-tab/tabcapture"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/capture"
)

func main() {
	log := plugins.Logger(tabcapture.Name)
	log.Info("starting", "version", tabcapture.Version, "extension", tabcapture.ExtensionID)
	plugins.Serve(capture.PluginSets(tabcapture.New(log)))
}
