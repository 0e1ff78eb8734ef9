package update

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Options locate the slots and the ESP. The CLI's defaults are the
// image's (see image/README.md).
type Options struct {
	ESP          string            // where the ESP is mounted (/efi)
	Slots        map[string]string // slot → device (/dev/disk/by-partlabel/tabcast-root-a)
	Current      string            // "auto" (from Cmdline), "a" or "b"
	Cmdline      string            // /proc/cmdline
	PartUUIDs    map[string]string // slot → PARTUUID; "" = look up in PartUUIDDir
	PartUUIDDir  string            // /dev/disk/by-partuuid
	Mountinfo    string            // /proc/self/mountinfo
	Tries        int               // boot tries of the new entry
	Log          io.Writer         // progress; nil = none
	AllowTrial   bool              // apply while the running entry is not yet marked good
	Sysfs        string            // /sys
	afterRemoval func()            // tests
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Result is what Apply did.
type Result struct {
	Manifest *Manifest
	KeyID    string
	From, To string // slots
	Entry    string // the new entry's file name
	Removed  []string
	Wrote    int64 // bytes of root file system image
}

// CurrentSlot is the running slot: o.Current, or tabcast.slot= on the
// kernel command line.
func CurrentSlot(o Options) (string, error) {
	if o.Current != "" && o.Current != "auto" {
		if !validSlot(o.Current) {
			return "", fmt.Errorf("--current %q: want a, b or auto", o.Current)
		}
		return o.Current, nil
	}
	p := o.Cmdline
	if p == "" {
		p = "/proc/cmdline"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("cannot tell the running slot: %w (pass --current a|b)", err)
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "tabcast.slot="); ok {
			if !validSlot(v) {
				return "", fmt.Errorf("cannot tell the running slot: %s has tabcast.slot=%q", p, v)
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("cannot tell the running slot: no tabcast.slot= in %s (pass --current a|b)", p)
}

// partUUID finds the PARTUUID of dev: the name of the entry of dir that
// resolves to the same file.
func partUUID(dev, dir string) (string, error) {
	want, err := os.Stat(dev)
	if err != nil {
		return "", err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("find the PARTUUID of %s: %w", dev, err)
	}
	for _, de := range des {
		st, err := os.Stat(filepath.Join(dir, de.Name()))
		if err == nil && os.SameFile(st, want) {
			return strings.ToLower(de.Name()), nil
		}
	}
	return "", fmt.Errorf("find the PARTUUID of %s: no link in %s points to it", dev, dir)
}

// mountedAt reports where the block device with rdev is mounted, if at
// all, from /proc/self/mountinfo ("major:minor" is field 3).
func mountedAt(mountinfo string, rdev uint64) string {
	f, err := os.Open(mountinfo)
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf("%d:%d", unixMajor(rdev), unixMinor(rdev))
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 && fs[2] == want {
			return fs[4]
		}
	}
	return ""
}

// diskOf is the disk holding the partition with device number dev
// ("vda", "nvme0n1"), from sysfs; "" when unknown or not a partition.
func diskOf(sysfs string, dev uint64) string {
	p, err := filepath.EvalSymlinks(filepath.Join(sysfs, "dev", "block", fmt.Sprintf("%d:%d", unixMajor(dev), unixMinor(dev))))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(p, "partition")); err != nil {
		return ""
	}
	return filepath.Base(filepath.Dir(p))
}

func unixMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func unixMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }

// refusal marks an error after which neither slot was touched.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() + "; nothing was written" }
func (r refusal) Unwrap() error { return r.err }

// NothingWritten reports whether err came before anything was written.
func NothingWritten(err error) bool {
	var r refusal
	return errors.As(err, &r)
}

// Apply reads a bundle from r in one pass and installs it into the slot
// that is not running. In order: the signature of the manifest is checked
// against keys before anything else is read; the plan is checked (running
// slot and its entry, target device size, PARTUUID, ESP space); the target
// slot's boot entries are removed; the root file system is streamed into
// the target device and its size and sha256 checked; kernel and initrd go
// to ESP/tabcast/<slot>/ (temp file, checked, renamed); nothing may follow
// them; then the new entry is written. On any error the target slot has
// no boot entry, and the running slot, its kernel and its entry are never
// written.
func Apply(r io.Reader, keys []PublicKey, o Options) (*Result, error) {
	if o.Tries < 1 || o.Tries > 9 {
		return nil, refusal{fmt.Errorf("--tries %d: want 1..9", o.Tries)}
	}
	b, err := openBundle(r, keys)
	if err != nil {
		return nil, refusal{err}
	}
	m := b.Manifest
	res := &Result{Manifest: m, KeyID: KeyID(b.Signer.Key)}
	o.logf("bundle: tabcast %s (created %s), signed by key %s", m.Version, m.Created.Format(time.RFC3339), res.KeyID)

	// --- plan: everything that can be checked without writing -----------
	cur, err := CurrentSlot(o)
	if err != nil {
		return nil, refusal{err}
	}
	tgt := other(cur)
	res.From, res.To = cur, tgt
	dev := o.Slots[tgt]
	if dev == "" {
		return nil, refusal{fmt.Errorf("no device for slot %s", tgt)}
	}
	esp, err := os.OpenRoot(o.ESP)
	if err != nil {
		return nil, refusal{fmt.Errorf("ESP: %w", err)}
	}
	defer esp.Close()
	entries, err := readEntries(esp)
	if err != nil {
		return nil, refusal{err}
	}
	var running *Entry
	gen := 0
	for i := range entries {
		e := &entries[i]
		if e.Slot == "" {
			continue
		}
		gen = max(gen, e.Gen)
		if e.Slot == cur && !e.Bad() && (running == nil || e.Gen > running.Gen) {
			running = e
		}
	}
	gen++
	if running == nil {
		return nil, refusal{fmt.Errorf("no usable boot entry for the running slot %s in %s/%s: it is the fallback, refusing", cur, o.ESP, EntriesDir)}
	}
	if running.Counting && !o.AllowTrial {
		return nil, refusal{fmt.Errorf("the running slot %s's entry %s is not marked good yet (boot not complete): replacing slot %s now would leave no known-good fallback", cur, running.Name, tgt)}
	}
	uuid := o.PartUUIDs[tgt]
	if uuid == "" {
		dir := o.PartUUIDDir
		if dir == "" {
			dir = "/dev/disk/by-partuuid"
		}
		if uuid, err = partUUID(dev, dir); err != nil {
			return nil, refusal{err}
		}
	}
	rootfs := m.File(MemberRootFS)
	st, err := os.Stat(dev)
	if err != nil {
		return nil, refusal{fmt.Errorf("slot %s: %w", tgt, err)}
	}
	flags := os.O_WRONLY
	if st.Mode()&os.ModeDevice != 0 {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			mi := o.Mountinfo
			if mi == "" {
				mi = "/proc/self/mountinfo"
			}
			if at := mountedAt(mi, uint64(sys.Rdev)); at != "" {
				return nil, refusal{fmt.Errorf("slot %s (%s) is mounted at %s", tgt, dev, at)}
			}
			// by-partlabel names can point to another disk carrying a
			// tabcast image (a USB stick): the target must be on the disk
			// the running system booted from.
			if rootSt, err := os.Stat("/"); err == nil {
				if rs, ok := rootSt.Sys().(*syscall.Stat_t); ok {
					sysfs := o.Sysfs
					if sysfs == "" {
						sysfs = "/sys"
					}
					td, rd := diskOf(sysfs, uint64(sys.Rdev)), diskOf(sysfs, uint64(rs.Dev))
					if td != "" && rd != "" && td != rd {
						return nil, refusal{fmt.Errorf("slot %s (%s) is on disk %s, but the running system is on %s: is another tabcast disk attached?", tgt, dev, td, rd)}
					}
				}
			}
		}
		flags |= syscall.O_EXCL // EBUSY while mounted or in use
	} else if !st.Mode().IsRegular() {
		return nil, refusal{fmt.Errorf("slot %s: %s is neither a block device nor a file", tgt, dev)}
	}
	devf, err := os.OpenFile(dev, flags, 0)
	if err != nil {
		return nil, refusal{fmt.Errorf("slot %s: %w", tgt, err)}
	}
	defer devf.Close()
	size, err := devf.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, refusal{fmt.Errorf("slot %s: size: %w", tgt, err)}
	}
	if rootfs.UncompressedSize > size {
		return nil, refusal{fmt.Errorf("the root file system (%d bytes) does not fit slot %s (%s, %d bytes)", rootfs.UncompressedSize, tgt, dev, size)}
	}
	kdir := path.Join("tabcast", tgt)
	for _, d := range []string{"tabcast", kdir} {
		if err := esp.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, refusal{fmt.Errorf("ESP %s: %w", d, err)}
		}
		if st, err := esp.Lstat(d); err != nil || !st.IsDir() {
			return nil, refusal{fmt.Errorf("ESP %s is not a directory", d)}
		}
	}
	need := m.File(MemberKernel).Size + m.File(MemberInitrd).Size
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(o.ESP, &sfs); err == nil {
		free := int64(sfs.Bavail) * int64(sfs.Bsize) //nolint:unconvert // int32 on some arches
		for _, n := range []string{MemberKernel, MemberInitrd} {
			if st, err := esp.Lstat(path.Join(kdir, n)); err == nil && st.Mode().IsRegular() {
				free += st.Size() // removed before the new one is written
			}
		}
		if need+(1<<20) > free {
			return nil, refusal{fmt.Errorf("the ESP has %d bytes free, kernel and initrd need %d", free, need)}
		}
	}
	options := rewriteOptions(running.Options, uuid, tgt)
	// The next member's header (only) is read now: a bundle with another
	// member in its place is refused before anything is written.
	p, err := b.nextPayload(MemberRootFS)
	if err != nil {
		return nil, refusal{err}
	}
	o.logf("running slot %s (%s); writing slot %s (%s, PARTUUID %s)", cur, running.Name, tgt, dev, uuid)

	// --- from here on the target slot is written -----------------------
	fail := func(err error) (*Result, error) {
		return res, fmt.Errorf("%w; slot %s has no boot entry, the running slot %s is untouched", err, tgt, cur)
	}
	for _, e := range entries {
		if e.Slot != tgt {
			continue
		}
		if err := esp.Remove(path.Join(EntriesDir, e.Name)); err != nil {
			return fail(fmt.Errorf("remove the old entry %s: %w", e.Name, err))
		}
		res.Removed = append(res.Removed, e.Name)
		o.logf("removed the old boot entry %s", e.Name)
	}
	if err := syncDir(esp, EntriesDir); err != nil {
		return fail(err)
	}
	for _, n := range []string{MemberKernel, MemberInitrd} {
		if err := esp.Remove(path.Join(kdir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(fmt.Errorf("remove the old %s: %w", path.Join(kdir, n), err))
		}
	}
	if o.afterRemoval != nil {
		o.afterRemoval()
	}

	rr, err := newRootFSReader(p)
	if err != nil {
		return fail(err)
	}
	if _, err := devf.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	o.logf("writing the root file system (%d bytes) to %s", rootfs.UncompressedSize, dev)
	n, err := io.CopyBuffer(onlyWriter{devf}, rr, make([]byte, copyBufSize))
	res.Wrote = n
	if err != nil {
		return fail(err)
	}
	if err := rr.check(); err != nil {
		return fail(err)
	}
	if err := devf.Sync(); err != nil {
		return fail(fmt.Errorf("slot %s: sync: %w", tgt, err))
	}
	if err := devf.Close(); err != nil {
		return fail(fmt.Errorf("slot %s: %w", tgt, err))
	}
	o.logf("root file system written and verified (sha256 %s)", rootfs.UncompressedSHA256)

	var temps []string
	defer func() {
		for _, t := range temps {
			_ = esp.Remove(t)
		}
	}()
	for _, name := range []string{MemberKernel, MemberInitrd} {
		p, err := b.nextPayload(name)
		if err != nil {
			return fail(err)
		}
		tmp := path.Join(kdir, "."+name+".tmp")
		_ = esp.Remove(tmp)
		f, err := esp.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fail(fmt.Errorf("ESP %s: %w", tmp, err))
		}
		temps = append(temps, tmp)
		_, err = io.CopyBuffer(onlyWriter{f}, p, make([]byte, copyBufSize))
		if err == nil {
			err = p.check()
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(err)
		}
	}
	if err := b.end(); err != nil {
		return fail(err)
	}
	for _, name := range []string{MemberKernel, MemberInitrd} {
		if err := esp.Rename(path.Join(kdir, "."+name+".tmp"), path.Join(kdir, name)); err != nil {
			return fail(fmt.Errorf("ESP %s: %w", path.Join(kdir, name), err))
		}
	}
	temps = nil
	if err := syncDir(esp, kdir); err != nil {
		return fail(err)
	}
	o.logf("kernel and initrd written to %s/%s", o.ESP, kdir)

	res.Entry = EntryName(gen, tgt, o.Tries)
	text := entryText(gen, m.Version, tgt, options)
	tmp := path.Join(EntriesDir, ".new-entry.tmp")
	_ = esp.Remove(tmp)
	f, err := esp.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fail(fmt.Errorf("ESP %s: %w", tmp, err))
	}
	_, err = f.WriteString(text)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = esp.Rename(tmp, path.Join(EntriesDir, res.Entry))
	}
	if err != nil {
		_ = esp.Remove(tmp)
		return fail(fmt.Errorf("write the boot entry: %w", err))
	}
	if err := syncDir(esp, EntriesDir); err != nil {
		return res, err
	}
	o.logf("boot entry %s written", res.Entry)
	return res, nil
}

// onlyWriter hides ReadFrom so io.CopyBuffer uses its bounded buffer.
type onlyWriter struct{ w io.Writer }

func (w onlyWriter) Write(p []byte) (int, error) { return w.w.Write(p) }

func syncDir(esp *os.Root, dir string) error {
	d, err := esp.Open(dir)
	if err != nil {
		return fmt.Errorf("ESP %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("ESP %s: sync: %w", dir, err)
	}
	return nil
}
