package tabcapture

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ext is the controlled MV3 extension the plugin makes Chromium load.
//
//go:embed ext/*
var ext embed.FS

// ExtensionID is the id Chromium gives the embedded extension: it follows
// from the manifest's fixed public key.
var ExtensionID = mustExtensionID()

func mustExtensionID() string {
	raw, err := ext.ReadFile("ext/manifest.json")
	if err != nil {
		panic(err)
	}
	var m struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(fmt.Sprintf("capture-tab: manifest.json: %v", err))
	}
	id, err := extensionIDFromKey(m.Key)
	if err != nil {
		panic(err)
	}
	return id
}

// extensionIDFromKey: the first 128 bits of SHA-256 of the DER public key,
// each hex digit 0-9a-f written as a letter a-p.
func extensionIDFromKey(b64 string) (string, error) {
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("capture-tab: manifest key: %w", err)
	}
	sum := sha256.Sum256(der)
	h := []byte(hex.EncodeToString(sum[:16]))
	for i, c := range h {
		if c <= '9' {
			h[i] = 'a' + (c - '0')
		} else {
			h[i] = 'a' + 10 + (c - 'a')
		}
	}
	return string(h), nil
}

// extDirPrefix starts the name of every extension directory; the pid of
// the plugin process that wrote it follows, so that the next one can tell
// a killed predecessor's directory (RemoveStale).
const extDirPrefix = "tabcast-capture-tab-ext-"

// writeExtension writes the extension into a new private directory (0700)
// and returns it.
func writeExtension() (string, error) {
	dir, err := os.MkdirTemp("", extDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	err = fs.WalkDir(ext, "ext", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := ext.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o600)
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// RemoveStale removes the extension directories that plugin processes no
// longer running left in the temp dir: Shutdown removes a plugin's own,
// but a killed plugin cannot, and the supervisor starts the next one at
// once, which calls this first. A directory of a live capture-tab process
// (another appliance's, or one still shutting down) is left alone, and so
// is one whose name carries no pid.
func RemoveStale(log *slog.Logger) {
	removeStale(os.TempDir(), pluginAlive, log)
}

func removeStale(tmp string, alive func(pid int) bool, log *slog.Logger) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), extDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		num, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(num)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove a stale extension directory", "err", err)
			continue
		}
		log.Info("removed the extension directory of a plugin process that is gone", "pid", pid)
	}
}

// pluginAlive reports whether pid is a running capture-tab process (a
// reused pid belongs to another program).
func pluginAlive(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return false
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		if i := strings.LastIndexByte(string(st), ')'); i >= 0 && i+2 < len(st) && (st[i+2] == 'Z' || st[i+2] == 'X') {
			return false // dead, not yet reaped
		}
	}
	return strings.TrimSpace(string(comm)) == Name
}
