package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

const (
	// maxLogLine bounds one plugin log line; the rest is dropped.
	maxLogLine = 16 << 10
	// maxLogAttrs bounds the attributes taken from one JSON line.
	maxLogAttrs = 32
)

// lineLogger is an io.Writer that splits a plugin's output into lines and
// re-logs each on the core's logger (already tagged plugin=<name>). JSON
// lines (slog or hclog) keep their level, message and attributes; other
// lines are logged as the message.
type lineLogger struct {
	log    *slog.Logger
	stream string

	mu        sync.Mutex
	buf       []byte
	truncated bool
	inPanic   bool // after "panic:" plain lines are errors (a stack trace)
}

func newLineLogger(log *slog.Logger, stream string) *lineLogger {
	return &lineLogger{log: log, stream: stream}
}

// Write never fails: losing the plugin's log must not break the plugin.
func (w *lineLogger) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := maxLogLine - len(w.buf); len(chunk) > room {
			w.buf = append(w.buf, chunk[:room]...)
			w.truncated = true
		} else {
			w.buf = append(w.buf, chunk...)
		}
		if i < 0 {
			break
		}
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

// Flush logs a last line that had no newline.
func (w *lineLogger) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emit()
}

func (w *lineLogger) emit() {
	line := bytes.TrimSpace(w.buf)
	truncated := w.truncated
	w.buf, w.truncated = w.buf[:0], false
	if len(line) == 0 {
		return
	}
	ctx := context.Background()
	if !truncated && line[0] == '{' {
		if lvl, msg, attrs, ok := parseJSONLine(line); ok {
			if w.log.Enabled(ctx, lvl) {
				w.log.LogAttrs(ctx, lvl, msg, attrs...)
			}
			return
		}
	}
	s := string(line)
	lvl := slog.LevelInfo
	if strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ") {
		w.inPanic = true
	}
	if w.inPanic {
		lvl = slog.LevelError
	}
	attrs := []slog.Attr{slog.String("stream", w.stream)}
	if truncated {
		attrs = append(attrs, slog.Bool("truncated", true))
	}
	w.log.LogAttrs(ctx, lvl, s, attrs...)
}

// keys that the re-logged record sets itself.
var dropKeys = map[string]bool{
	"time": true, "level": true, "msg": true, "plugin": true,
	"@timestamp": true, "@level": true, "@message": true, "@module": true,
}

// parseJSONLine reads a slog ("level","msg") or hclog ("@level",
// "@message") JSON line.
func parseJSONLine(line []byte) (slog.Level, string, []slog.Attr, bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || dec.More() {
		return 0, "", nil, false
	}
	lvlText, _ := m["level"].(string)
	if lvlText == "" {
		lvlText, _ = m["@level"].(string)
	}
	msg, _ := m["msg"].(string)
	if msg == "" {
		msg, _ = m["@message"].(string)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !dropKeys[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > maxLogAttrs {
		keys = keys[:maxLogAttrs]
	}
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, m[k]))
	}
	return parseLevel(lvlText), msg, attrs, true
}

func parseLevel(s string) slog.Level {
	switch strings.ToUpper(s) {
	case "TRACE":
		return slog.LevelDebug - 4
	case "WARNING":
		return slog.LevelWarn
	case "":
		return slog.LevelInfo
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
