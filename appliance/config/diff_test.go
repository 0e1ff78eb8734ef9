package config

import (
	"reflect"
	"testing"
	"time"
)

func TestChanged(t *testing.T) {
	a := &Config{Video: Video{BitrateKbps: 2500, KeyframeInterval: 2 * time.Second},
		Plugins: Plugins{Config: map[string]map[string]any{"encoder-ffmpeg": {"threads": 1}, "turnd": {"listenUDP": ":3478"}}}}
	b := *a
	b.Video.BitrateKbps = 1200
	b.Input.AllowHosts = []string{"example.com"}
	b.Plugins.Config = map[string]map[string]any{"encoder-ffmpeg": {"threads": 2}, "turnd": {"listenUDP": ":3478"}, "capture-tab": {}}
	got := Changed(a, &b)
	want := []string{"input.allowHosts", "plugins.config.capture-tab", "plugins.config.encoder-ffmpeg", "video.bitrateKbps"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Changed = %v, want %v", got, want)
	}
	if got := Changed(a, a); len(got) != 0 {
		t.Errorf("no change reported %v", got)
	}
}
