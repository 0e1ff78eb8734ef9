package ffenc

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asticode/go-astiav"
)

// FFmpeg's log is process-global, so its routing is too: one callback that
// forwards warnings to the current logger (rate-limited, a corrupt JPEG can
// make the decoder warn on every frame) and, while a probe runs, collects
// every line for the probe report.
var ffLog struct {
	once    sync.Once
	probeMu sync.Mutex // one collector at a time

	mu         sync.Mutex
	log        *slog.Logger
	collect    *[]string
	lastFwd    time.Time
	suppressed int
}

// ffLogLevel is the level outside probes. Above warning, libx264 and the
// mjpeg decoder log per stream or per frame. It also keeps lines short:
// astiav formats each line into a 1 KiB stack buffer.
const ffLogLevel = astiav.LogLevelWarning

// installFFmpegLog routes FFmpeg's log to l (nil keeps the current
// logger, or drops the lines when there is none).
func installFFmpegLog(l *slog.Logger) {
	ffLog.mu.Lock()
	if l != nil {
		ffLog.log = l
	}
	ffLog.mu.Unlock()
	ffLog.once.Do(func() {
		astiav.SetLogLevel(ffLogLevel)
		astiav.SetLogCallback(onFFmpegLog)
	})
}

func onFFmpegLog(c astiav.Classer, l astiav.LogLevel, _, msg string) {
	msg = strings.TrimSpace(msg)
	// swscale warns on every yuvj* context; the range is handled (the j
	// formats are how it learns the source is full range).
	if msg == "" || strings.HasPrefix(msg, "deprecated pixel format used") {
		return
	}
	if c != nil {
		if cl := c.Class(); cl != nil {
			msg = "[" + cl.Name() + "] " + msg
		}
	}
	ffLog.mu.Lock()
	defer ffLog.mu.Unlock()
	if ffLog.collect != nil {
		*ffLog.collect = append(*ffLog.collect, msg)
		return
	}
	if ffLog.log == nil || l > astiav.LogLevelWarning {
		return
	}
	now := time.Now()
	if now.Sub(ffLog.lastFwd) < time.Second {
		ffLog.suppressed++
		return
	}
	level := slog.LevelWarn
	if l <= astiav.LogLevelError {
		level = slog.LevelError
	}
	ffLog.log.Log(context.Background(), level, "ffmpeg", "msg", msg, "suppressed", ffLog.suppressed)
	ffLog.lastFwd, ffLog.suppressed = now, 0
}

// collectFFmpegLog runs fn with FFmpeg logging at info level and returns the
// lines logged meanwhile (by any context: probes run before streams).
func collectFFmpegLog(fn func()) []string {
	ffLog.probeMu.Lock()
	defer ffLog.probeMu.Unlock()
	var lines []string
	ffLog.mu.Lock()
	ffLog.collect = &lines
	ffLog.mu.Unlock()
	astiav.SetLogLevel(astiav.LogLevelInfo)
	defer func() {
		astiav.SetLogLevel(ffLogLevel)
		ffLog.mu.Lock()
		ffLog.collect = nil
		ffLog.mu.Unlock()
	}()
	fn()
	ffLog.mu.Lock()
	defer ffLog.mu.Unlock()
	return append([]string(nil), lines...)
}
