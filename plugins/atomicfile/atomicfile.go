// Package atomicfile writes small state files (users, tokens, secrets,
// keys) so that a crash leaves the old file or the new one, never part of
// one, and the file never exists with a wider mode than asked. Plugins and
// the core share it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path through a temp file in the same directory,
// fsync and rename. The file has mode perm from the start; a missing
// directory is created (0700).
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, nil)
}

// WriteOwned is Write for a file that must belong to uid:gid from the start
// (a root-run tool writing a service user's file).
func WriteOwned(path string, data []byte, perm os.FileMode, uid, gid int) error {
	return write(path, data, perm, func(f *os.File) error {
		if err := f.Chown(uid, gid); err != nil {
			return fmt.Errorf("write %s: chown: %w", path, err)
		}
		return nil
	})
}

func write(path string, data []byte, perm os.FileMode, prepare func(*os.File) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: chmod: %w", path, err)
	}
	if prepare != nil {
		if err := prepare(tmp); err != nil {
			return err
		}
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: close: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("write %s: rename: %w", path, err)
	}
	ok = true
	// Persist the rename itself; best effort.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
