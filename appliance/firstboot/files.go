package firstboot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/tabcast/tabcast/plugins/atomicfile"
)

// owner is a uid/gid to give files; nil keeps the writer's.
type owner struct{ uid, gid int }

// ownerOf returns the owner of dir, for files written into a directory
// another user (tabcast) owns, e.g. config.yaml and users.yaml. Only root
// can give files away; otherwise nil.
func ownerOf(dir string) *owner {
	if os.Geteuid() != 0 {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return &owner{int(s.Uid), int(s.Gid)}
}

// writeFile replaces path atomically (temp file, fsync, rename, directory
// fsync) unless it already holds data with mode perm (and owner). It
// reports whether it wrote.
func writeFile(path string, data []byte, perm os.FileMode, own *owner) (bool, error) {
	if same(path, data, perm, own) {
		return false, nil
	}
	var err error
	if own != nil {
		err = atomicfile.WriteOwned(path, data, perm, own.uid, own.gid)
	} else {
		err = atomicfile.Write(path, data, perm)
	}
	return err == nil, err
}

func same(path string, data []byte, perm os.FileMode, own *owner) bool {
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != perm {
		return false
	}
	if own != nil {
		if s, ok := st.Sys().(*syscall.Stat_t); !ok || int(s.Uid) != own.uid || int(s.Gid) != own.gid {
			return false
		}
	}
	old, err := os.ReadFile(path)
	return err == nil && bytes.Equal(old, data)
}

// removeFile removes path; reports whether it existed.
func removeFile(path string) (bool, error) {
	err := os.Remove(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("remove %s: %w", path, err)
	}
	syncDir(filepath.Dir(path))
	return true, nil
}

// syncDir persists renames and removals in dir; best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// The state dir (/var/lib/tabcast/etc) belongs to the tabcast user, who
// could swap a subdirectory for one of its own. What root applies from it
// (system settings, SSH keys) must therefore come from a directory and
// files owned by the applying user (root) and writable by no one else:
// tabcast cannot make such files, so it cannot get root to apply its own.

// trustedDir creates dir (0700) if needed and checks that it is ours.
func trustedDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return checkTrusted(dir, true)
}

func checkTrusted(path string, dir bool) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return trustedStat(path, st, dir)
}

func trustedStat(path string, st os.FileInfo, dir bool) error {
	s, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case dir && !st.IsDir(), !dir && !st.Mode().IsRegular():
		return fmt.Errorf("refusing %s: not a plain %s", path, map[bool]string{true: "directory", false: "file"}[dir])
	case !ok || int(s.Uid) != os.Geteuid():
		return fmt.Errorf("refusing %s: not owned by uid %d", path, os.Geteuid())
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("refusing %s: writable by group or others", path)
	}
	return nil
}

// readTrusted reads a file from a trusted directory; a missing file is
// os.ErrNotExist.
func readTrusted(path string) ([]byte, error) {
	if err := checkTrusted(filepath.Dir(path), true); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := trustedStat(path, st, false); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
