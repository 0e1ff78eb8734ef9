// Command encoder-ffmpeg is the FFmpeg encoder plugin: screencast JPEGs in,
// H.264 or VP8 out, served over go-plugin gRPC.
package main

import (
	"context"

	"github.com/tabcast/tabcast/encoder-ffmpeg/ffenc"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/encoder"
)

func main() {
	p := ffenc.New(plugins.Logger(ffenc.Name))
	plugins.Serve(encoder.PluginSets(p))
	// The host may close the plugin without calling Shutdown first.
	_ = p.Shutdown(context.Background())
}
