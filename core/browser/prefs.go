package browser

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// webrtcPrefs keep a page's WebRTC inside the egress wall: with
// "disable_non_proxied_udp" a page's RTCPeerConnection gathers no UDP
// candidate of its own and reaches peers only over TCP to a TURN server
// through its context's proxy — the egress proxy, which decides on the
// address like any other connection. Without it a page could send STUN to
// any address (an intranet host, the metadata service) around the proxy.
// Extension pages keep the default: capture-tab's offscreen document holds
// a loopback peer connection to its plugin. The first matching URL rule
// wins; pages match none and take the profile-wide policy.
var webrtcPrefs = map[string]any{
	"ip_handling_policy": "disable_non_proxied_udp",
	"ip_handling_url":    []any{map[string]any{"url": "chrome-extension://*", "handling": "default"}},
}

// writePrefs sets the profile's WebRTC preferences before Chromium starts
// (a fresh profile gets a Preferences file, a persistent one keeps
// everything else it holds). Browser contexts created over CDP read them
// through their parent profile.
func writePrefs(profile string) error {
	path := filepath.Join(profile, "Default", "Preferences")
	prefs := map[string]any{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &prefs); err != nil {
			// A damaged file would be reset by Chromium anyway.
			prefs = map[string]any{}
		}
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("read preferences: %w", err)
	}
	w, _ := prefs["webrtc"].(map[string]any)
	if w == nil {
		w = map[string]any{}
	}
	for k, v := range webrtcPrefs {
		w[k] = v
	}
	prefs["webrtc"] = w
	b, err := json.Marshal(prefs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("preferences dir: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write preferences: %w", err)
	}
	return nil
}
