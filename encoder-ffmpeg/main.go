// Command encoder-ffmpeg is the FFmpeg encoder plugin: screencast JPEGs in,
// H.264 or VP8 out, served over go-plugin gRPC.
//
// Run by hand, `encoder-ffmpeg selftest` checks every encoder on this
// machine for real (hardware ones above all) and exits non-zero if one that
// opens does not work; see ffenc.SelfTest.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tabcast/tabcast/encoder-ffmpeg/ffenc"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/encoder"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "selftest" {
		os.Exit(selfTest(os.Args[2:], os.Stdout, os.Stderr))
	}
	p := ffenc.New(plugins.Logger(ffenc.Name))
	plugins.Serve(encoder.PluginSets(p))
	// The host may close the plugin without calling Shutdown first.
	_ = p.Shutdown(context.Background())
}

// selfTestCases are what `selftest` runs: each hardware encoder, then
// software, then what auto picks for each codec.
var selfTestCases = []struct{ hardware, codec string }{
	{ffenc.HardwareVAAPI, encoder.CodecH264},
	{ffenc.HardwareVAAPI, encoder.CodecVP8},
	{ffenc.HardwareNVENC, encoder.CodecH264},
	{ffenc.HardwareOff, encoder.CodecH264},
	{ffenc.HardwareOff, encoder.CodecVP8},
	{ffenc.HardwareAuto, encoder.CodecH264},
	{ffenc.HardwareAuto, encoder.CodecVP8},
}

// selfTest exit codes: 0 every encoder that opened passed (and every
// --require'd one opened), 1 one failed, 2 bad usage.
func selfTest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the results as JSON")
	require := fs.String("require", "", "comma-separated hardware kinds (vaapi, nvenc) that must be available: unavailable is then a failure")
	verbose := fs.Bool("v", false, "log FFmpeg's and the plugin's warnings to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "selftest: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var required []string
	for _, r := range strings.Split(*require, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if r != ffenc.HardwareVAAPI && r != ffenc.HardwareNVENC {
			fmt.Fprintf(stderr, "selftest: --require %q: want vaapi or nvenc\n", r)
			return 2
		}
		required = append(required, r)
	}
	level := slog.LevelError + 1 // FFmpeg's words are in the results already
	if *verbose {
		level = slog.LevelWarn
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p := ffenc.New(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	defer p.Shutdown(context.Background())

	code := 0
	var results []ffenc.SelfTestResult
	for _, c := range selfTestCases {
		r := ffenc.SelfTest(ctx, p, c.hardware, c.codec)
		results = append(results, r)
		switch {
		case r.OK:
		case !r.Available && !slices.Contains(required, c.hardware):
		default:
			code = 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": code == 0, "results": results})
		return code
	}
	for _, r := range results {
		what := fmt.Sprintf("%-6s %-5s", r.Hardware, r.Codec)
		switch {
		case r.OK:
			fmt.Fprintf(stdout, "ok           %s %-12s %d frames, %d keyframes, %d bytes, min luma correlation %.3f, %v\n",
				what, r.Encoder, r.Frames, r.Keyframes, r.Bytes, r.MinCorr, r.Duration.Round(time.Millisecond))
		case !r.Available:
			fmt.Fprintf(stdout, "unavailable  %s %s\n", what, r.Error)
		default:
			fmt.Fprintf(stdout, "FAILED       %s %-12s %s\n", what, r.Encoder, r.Error)
		}
	}
	return code
}
