package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins"
)

// Options are what `tabcast run` gives the appliance besides its config:
// the build's version and how to re-read the config on SIGHUP.
type Options struct {
	Version string
	Load    func() (*config.Config, error) // nil: reloads are off
	Level   *slog.LevelVar
}

// Keys a reload applies to the running appliance; every other change is
// logged as needing a restart and is not taken.
var liveKeys = map[string]bool{
	"video.bitrateKbps": true, "video.fps": true, "video.idleFps": true, "video.keyframeInterval": true, "video.hardware": true,
	"log.level": true,
}

// reload re-reads the configuration and applies what can change live: the
// encode targets (running pipelines follow at once), the log level and the
// config subtrees of running plugins (handed to the live process, which
// keeps its sessions). An invalid file, or a subtree a plugin refuses,
// changes nothing: the error names the key. It runs on run's goroutine.
func (a *appliance) reload(ctx context.Context) {
	if a.rl.Load == nil {
		return
	}
	next, err := a.rl.Load()
	if err != nil {
		a.log.Error("config reload refused; the running config stays", "err", err)
		return
	}
	changed := config.Changed(a.cfg, next)
	if len(changed) == 0 {
		a.log.Info("config reload: nothing changed")
		return
	}
	cur := *a.cfg
	cur.Plugins.Config = map[string]map[string]any{}
	for k, v := range a.cfg.Plugins.Config {
		cur.Plugins.Config[k] = v
	}
	var applied, restart []string
	type undo struct {
		h   *supervisor.Handle
		old json.RawMessage
	}
	var undos []undo
	rollback := func() {
		for i := len(undos) - 1; i >= 0; i-- {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := undos[i].h.Reconfigure(rctx, undos[i].old); err != nil {
				a.log.Error("config reload: restoring a plugin's config failed", "plugin", undos[i].h.Name(), "err", err)
			}
			cancel()
		}
	}
	for _, key := range changed {
		name, isPlugin := strings.CutPrefix(key, "plugins.config.")
		switch {
		case isPlugin:
			h := a.pluginNamed(name)
			if h == nil { // not running: the new subtree is what it starts with
				cur.Plugins.Config[name] = next.Plugins.Config[name]
				applied = append(applied, key)
				continue
			}
			oldConf, err1 := a.pluginConfig(a.cfg, name)
			newConf, err2 := a.pluginConfig(next, name)
			if err := firstErr(err1, err2); err != nil {
				rollback()
				a.log.Error("config reload refused; the running config stays", "key", key, "err", err)
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := h.Reconfigure(rctx, newConf)
			cancel()
			if err != nil {
				rollback()
				a.log.Error("config reload refused; the running config stays", "key", key, "err", err)
				return
			}
			undos = append(undos, undo{h, oldConf})
			cur.Plugins.Config[name] = next.Plugins.Config[name]
			applied = append(applied, key)
		case liveKeys[key]:
			applied = append(applied, key)
		default:
			restart = append(restart, key)
		}
	}
	cur.Video.BitrateKbps, cur.Video.FPS, cur.Video.IdleFPS = next.Video.BitrateKbps, next.Video.FPS, next.Video.IdleFPS
	cur.Video.KeyframeInterval, cur.Video.Hardware = next.Video.KeyframeInterval, next.Video.Hardware
	cur.Log.Level = next.Log.Level
	a.sessions.SetVideo(sessionVideo(cur.Video))
	if a.rl.Level != nil {
		setLevel(a.rl.Level, cur.Log.Level)
	}
	a.cfg = &cur
	a.log.Info("config reloaded", "applied", applied, "needsRestart", restart)
}

// pluginNamed is the running plugin of that name, or nil.
func (a *appliance) pluginNamed(name string) *supervisor.Handle {
	_, h := a.roleNamed(name)
	return h
}

// roleNamed is the role and running plugin of that name (nil when none).
func (a *appliance) roleNamed(name string) (plugins.Role, *supervisor.Handle) {
	for _, s := range plugins.Catalog() {
		if h := a.running(s); h != nil && h.Name() == name {
			return s, h
		}
	}
	return plugins.Role{}, nil
}

// running is the plugin running in role s, or nil.
func (a *appliance) running(s plugins.Role) *supervisor.Handle {
	switch s {
	case plugins.RoleCapture:
		return a.capture
	case plugins.RoleTabCapture:
		return a.tab
	case plugins.RoleEncoder:
		return a.encoder
	case plugins.RoleAuth:
		return a.gate.plugin
	case plugins.RoleTurn:
		return a.relay
	}
	return nil
}

// pluginConfig is what a plugin is given for cfg: the relay's carries the
// appliance's own addresses too (see pluginConfigFor).
func (a *appliance) pluginConfig(cfg *config.Config, name string) (json.RawMessage, error) {
	if s, h := a.roleNamed(name); h != nil && s == plugins.RoleTurn {
		return relayConfig(cfg)
	}
	return cfg.PluginConfigJSON(name)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
