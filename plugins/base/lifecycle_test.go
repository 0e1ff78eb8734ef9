package base_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tabcast/tabcast/plugins/base"
)

type conf struct {
	Quality int    `json:"quality"`
	Mode    string `json:"mode"`
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	var applied []conf
	shutdowns := 0
	l := base.NewLifecycle(base.LifecycleSpec[conf]{
		Info:     base.Info{Name: "thing", Version: "1", Kind: "capture", Capabilities: map[string]string{"a": "b"}},
		Schema:   `{"type":"object"}`,
		Defaults: func() conf { return conf{Quality: 80, Mode: "fast"} },
		Apply: func(_ context.Context, c conf) error {
			if c.Quality > 100 {
				return &base.ConfigError{Key: "quality", Message: "too high"}
			}
			applied = append(applied, c)
			return nil
		},
		OnShutdown: func(context.Context) error { shutdowns++; return errors.New("cleanup failed") },
	})
	info, _ := l.Info(ctx)
	info.Capabilities["a"] = "changed"
	if again, _ := l.Info(ctx); again.Name != "thing" || again.Capabilities["a"] != "b" {
		t.Fatalf("Info = %+v: the caller's copy must not change the plugin's", again)
	}
	sc, err := l.ConfigSchema(ctx)
	var def conf
	if err != nil || string(sc.JSONSchema) != `{"type":"object"}` || json.Unmarshal(sc.DefaultsJSON, &def) != nil || def != (conf{80, "fast"}) {
		t.Fatalf("ConfigSchema = %s %s %v", sc.JSONSchema, sc.DefaultsJSON, err)
	}
	if got := l.Config(); got != (conf{80, "fast"}) {
		t.Fatalf("Config before SetConfig = %+v, want the defaults", got)
	}
	// Absent keys take the defaults.
	if err := l.SetConfig(ctx, []byte(`{"quality": 50}`)); err != nil || l.Config() != (conf{50, "fast"}) {
		t.Fatalf("SetConfig: %v, config %+v", err, l.Config())
	}
	// Unknown keys and refused values change nothing.
	for _, raw := range []string{`{"nope": 1}`, `{"quality": 101}`, `{"quality": "x"}`} {
		err := l.SetConfig(ctx, []byte(raw))
		if _, ok := base.AsConfigError(err); !ok {
			t.Errorf("SetConfig(%s) = %v, want a *ConfigError", raw, err)
		}
		if l.Config() != (conf{50, "fast"}) {
			t.Errorf("SetConfig(%s) changed the config to %+v", raw, l.Config())
		}
	}
	if len(applied) != 1 {
		t.Fatalf("Apply took %v, want the one good config", applied)
	}
	if err := l.Ping(ctx); err != nil || l.Life().Err() != nil {
		t.Fatalf("Ping before Shutdown: %v", err)
	}
	for range 2 {
		if err := l.Shutdown(ctx); err == nil || err.Error() != "cleanup failed" {
			t.Fatalf("Shutdown = %v, want OnShutdown's error", err)
		}
	}
	if shutdowns != 1 || l.Life().Err() == nil {
		t.Fatalf("OnShutdown ran %d times, life %v", shutdowns, l.Life().Err())
	}
	if err := l.Ping(ctx); err == nil || err.Error() != "thing: shut down" {
		t.Fatalf("Ping after Shutdown = %v", err)
	}
}
