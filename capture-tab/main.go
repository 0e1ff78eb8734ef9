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
	// A predecessor killed before it could remove its extension
	// directory: this process, its restart, removes it now.
	tabcapture.RemoveStale(log)
	plugins.Serve(capture.PluginSets(tabcapture.New(log)))
}
