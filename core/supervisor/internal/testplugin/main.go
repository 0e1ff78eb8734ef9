// Command testplugin is a capture plugin for the supervisor's tests. Its
// behaviour comes from its binary name and its config:
//   - a name containing "failstart" exits 1 before serving;
//   - config {"hang_after_ms": N}: Ping stops answering N ms after start;
//   - config {"spawn_child": true}: spawns "sleep 300" in its process group
//     (with "child_keeps_stderr": true the child inherits the real stderr);
//   - config {"foo": {"bar": …}}: refused with a ConfigError on "foo.bar".
//
// Stream sends small synthetic JPEG-looking frames every 20 ms.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
)

type config struct {
	HangAfterMS int  `json:"hang_after_ms"`
	SpawnChild  bool `json:"spawn_child"`
	// ChildKeepsStderr gives the child the plugin's real stderr, so the
	// pipe to the host stays open after the plugin itself dies.
	ChildKeepsStderr bool `json:"child_keeps_stderr"`
	Foo              *struct {
		Bar any `json:"bar"`
	} `json:"foo"`
}

type testPlugin struct {
	name    string
	started time.Time

	mu        sync.Mutex
	hangAfter time.Duration
	child     *exec.Cmd
}

func (p *testPlugin) Info(context.Context) (base.Info, error) {
	return base.Info{Name: p.name, Version: "test-1", Kind: plugins.KindCapture, APIVersion: 1,
		Capabilities: map[string]string{"pid": fmt.Sprint(os.Getpid())}}, nil
}

func (p *testPlugin) ConfigSchema(context.Context) (base.Schema, error) {
	return base.Schema{JSONSchema: []byte(`{"type":"object"}`), DefaultsJSON: []byte(`{}`)}, nil
}

func (p *testPlugin) SetConfig(_ context.Context, raw []byte) error {
	var c config
	if err := base.DecodeStrict(raw, &c); err != nil {
		return err
	}
	if c.Foo != nil && c.Foo.Bar != nil {
		return &base.ConfigError{Key: "foo.bar", Message: "refused by the test plugin"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hangAfter = time.Duration(c.HangAfterMS) * time.Millisecond
	if c.SpawnChild && p.child == nil {
		cmd := exec.Command("sleep", "300")
		if c.ChildKeepsStderr {
			cmd.Stderr = realStderr
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("spawn child: %w", err)
		}
		p.child = cmd
		fmt.Fprintf(os.Stderr, "{\"level\":\"INFO\",\"msg\":\"child spawned\",\"child_pid\":%d}\n", cmd.Process.Pid)
	}
	return nil
}

func (p *testPlugin) Ping(ctx context.Context) error {
	p.mu.Lock()
	hang := p.hangAfter
	p.mu.Unlock()
	if hang > 0 && time.Since(p.started) > hang {
		<-ctx.Done() // stop answering
		return ctx.Err()
	}
	return nil
}

func (p *testPlugin) Shutdown(context.Context) error { return nil }

func (p *testPlugin) ChromiumFlags(context.Context) ([]string, error) {
	return []string{"--test-flag"}, nil
}

func (p *testPlugin) Stream(ctx context.Context, t capture.Target, send func(capture.Frame) error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		data := []byte{0xFF, 0xD8, 0xFF, 0xE0, byte(seq), 0xFF, 0xD9}
		if err := send(capture.Frame{Format: capture.FormatJPEG, Data: data, CaptureTime: time.Now(),
			Width: t.Width, Height: t.Height, Seq: seq}); err != nil {
			return err
		}
	}
}

// realStderr is the process's stderr; plugins.Serve replaces os.Stderr.
var realStderr = os.Stderr

func main() {
	name := filepath.Base(os.Args[0])
	log := plugins.Logger(name)
	log.Info("testplugin starting", "pid", os.Getpid())
	log.Warn("testplugin warn line", "n", 7)
	fmt.Fprintln(os.Stderr, "plain stderr line")
	if strings.Contains(name, "failstart") {
		log.Error("failing at start on purpose")
		os.Exit(1)
	}
	plugins.Serve(capture.PluginSets(&testPlugin{name: name, started: time.Now()}))
}
