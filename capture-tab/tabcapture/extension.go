package tabcapture

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// writeExtension writes the extension into a new private directory (0700)
// and returns it.
func writeExtension() (string, error) {
	dir, err := os.MkdirTemp("", "tabcast-capture-tab-ext-")
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
