package config

// KeyError is one configuration problem. Load returns errors.Join of them,
// so callers can errors.As for the first or read the joined message.
type KeyError struct {
	Key     string // full dotted key path, e.g. "video.fps"
	Problem string // e.g. "out of range: 0 not in [1, 60]"
	Source  string // where the value came from, e.g. "env TABCAST_VIDEO__FPS"; may be ""
}

func (e *KeyError) Error() string {
	msg := "config: " + e.Key + ": " + e.Problem
	if e.Source != "" {
		msg += " (from " + e.Source + ")"
	}
	return msg
}
