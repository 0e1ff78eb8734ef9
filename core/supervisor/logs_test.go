package supervisor

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func relog(t *testing.T, writes ...string) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4})).With("plugin", "p1")
	w := newLineLogger(log, "stderr")
	for _, s := range writes {
		if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	w.Flush()
	var out []map[string]any
	for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if bytes.Count(line, []byte(`"plugin":`)) != 1 {
			t.Errorf("line without exactly one plugin key: %s", line)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		out = append(out, m)
	}
	return out
}

func TestLineLoggerFormats(t *testing.T) {
	got := relog(t,
		`{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"slow","plugin":"spoofed","ms":12,"nested":{"a":1}}`+"\n",
		`{"@level":"debug","@message":"plugin address","@timestamp":"x","@module":"plugin","network":"unix"}`+"\n",
		`{"level":"INFO+2","msg":"between"}`+"\n"+`{"level":"trace","msg":"fine"}`+"\n",
		"plain ", "text split over writes\n\n\n",
		`{"msg": "no level"} trailing`+"\n",
		"panic: boom\n", "goroutine 1 [running]:\n",
		"last line without newline",
	)
	want := []struct {
		level, msg string
	}{
		{"WARN", "slow"}, {"DEBUG", "plugin address"}, {"INFO+2", "between"}, {"DEBUG-4", "fine"},
		{"INFO", "plain text split over writes"}, {"INFO", `{"msg": "no level"} trailing`},
		{"ERROR", "panic: boom"}, {"ERROR", "goroutine 1 [running]:"}, {"ERROR", "last line without newline"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i]["level"] != w.level || got[i]["msg"] != w.msg || got[i]["plugin"] != "p1" {
			t.Errorf("record %d = %v, want level %s msg %q plugin p1", i, got[i], w.level, w.msg)
		}
	}
	if got[0]["ms"] != float64(12) || got[0]["nested"].(map[string]any)["a"] != float64(1) {
		t.Errorf("attributes lost: %v", got[0])
	}
	if got[1]["network"] != "unix" || got[1]["@module"] != nil {
		t.Errorf("hclog record: %v", got[1])
	}
	if got[4]["stream"] != "stderr" {
		t.Errorf("plain record has no stream: %v", got[4])
	}
}

func TestLineLoggerBoundsLines(t *testing.T) {
	long := `{"level":"INFO","msg":"` + strings.Repeat("x", 3*maxLogLine) + `"}`
	var many strings.Builder
	many.WriteString(`{"msg":"many"`)
	for i := range 100 {
		many.WriteString(`,"k` + strings.Repeat("z", i%3) + string(rune('a'+i%26)) + `":` + "1")
	}
	many.WriteString("}\n")
	got := relog(t, long[:5000], long[5000:]+"\nafter\n", many.String())
	if len(got) != 3 {
		t.Fatalf("got %d records: %v", len(got), got)
	}
	msg := got[0]["msg"].(string)
	if len(msg) != maxLogLine || got[0]["truncated"] != true {
		t.Errorf("long line: len %d truncated %v", len(msg), got[0]["truncated"])
	}
	if got[1]["msg"] != "after" {
		t.Errorf("line after a long one: %v", got[1])
	}
	if n := len(got[2]); n > maxLogAttrs+4 { // + time, level, msg, plugin
		t.Errorf("%d attributes kept, want at most %d", n-4, maxLogAttrs)
	}
}
