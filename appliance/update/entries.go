package update

import (
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Boot entries (ESP loader/entries/*.conf) of the appliance are named
//
//	tabcast-<gen>-<slot>[+<left>[-<done>]].conf
//
// gen is a zero-padded generation, one more than the highest on the ESP at
// each update; every entry has "sort-key tabcast" and "version <gen>-<ver>".
// The +left-done suffix is systemd-boot's boot counter. Images from before
// this scheme wrote tabcast-<slot>[+...].conf; those read as generation 0.
// See DefaultEntry for why the newest good entry boots and a bad one does
// not.
const (
	EntriesDir = "loader/entries"
	SortKey    = "tabcast"
	genWidth   = 4
	maxEntry   = 64 << 10
)

var (
	entryRE  = regexp.MustCompile(`^tabcast-([0-9]+)-([ab])$`)
	legacyRE = regexp.MustCompile(`^tabcast-([ab])$`)
	counterR = regexp.MustCompile(`^\+([0-9]+)(?:-([0-9]+))?$`)
)

// Entry is one loader entry file.
type Entry struct {
	Name string // file name
	ID   string // name without the counter and .conf
	Slot string // "a", "b"; "" = not one of ours
	Gen  int
	// Counting: the name has +left[-done]. Left 0 = "bad" (tries used up).
	Counting   bool
	Left, Done int
	// Fields of the file.
	Title, Version, SortKey, Linux, Initrd string
	Options                                string
}

// Bad is an entry whose tries ran out.
func (e *Entry) Bad() bool { return e.Counting && e.Left == 0 }

// State describes the entry for people.
func (e *Entry) State() string {
	switch {
	case !e.Counting:
		return "good (booted successfully)"
	case e.Left == 0:
		return fmt.Sprintf("bad (%d tries failed; systemd-boot falls back past it)", e.Done)
	case e.Done == 0 && e.Left == 1:
		return "new, not booted yet (1 try)"
	case e.Done == 0:
		return fmt.Sprintf("new, not booted yet (%d tries)", e.Left)
	default:
		return fmt.Sprintf("on trial (%d tries left, %d done)", e.Left, e.Done)
	}
}

// parseEntryName splits a loader entry file name.
func parseEntryName(name string) (Entry, bool) {
	e := Entry{Name: name}
	base, ok := strings.CutSuffix(name, ".conf")
	if !ok || base == "" {
		return e, false
	}
	if i := strings.LastIndexByte(base, '+'); i >= 0 {
		if m := counterR.FindStringSubmatch(base[i:]); m != nil {
			left, err1 := strconv.Atoi(m[1])
			done := 0
			var err2 error
			if m[2] != "" {
				done, err2 = strconv.Atoi(m[2])
			}
			if err1 == nil && err2 == nil {
				e.Counting, e.Left, e.Done = true, left, done
				base = base[:i]
			}
		}
	}
	e.ID = base
	if m := entryRE.FindStringSubmatch(base); m != nil {
		g, err := strconv.Atoi(m[1])
		if err == nil {
			e.Gen, e.Slot = g, m[2]
		}
	} else if m := legacyRE.FindStringSubmatch(base); m != nil {
		e.Slot = m[1]
	}
	return e, true
}

// EntryName is the file name of a new entry.
func EntryName(gen int, slot string, tries int) string {
	return fmt.Sprintf("tabcast-%0*d-%s+%d.conf", genWidth, gen, slot, tries)
}

// parseEntryBody fills the fields from an entry file's text. Several
// options lines are joined, as systemd-boot does.
func (e *Entry) parseEntryBody(text string) {
	var opts []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(strings.ReplaceAll(line, "\t", " "), " ")
		v = strings.TrimSpace(v)
		switch k {
		case "title":
			e.Title = v
		case "version":
			e.Version = v
		case "sort-key":
			e.SortKey = v
		case "linux":
			e.Linux = v
		case "initrd":
			if e.Initrd == "" {
				e.Initrd = v
			}
		case "options":
			opts = append(opts, v)
		}
	}
	e.Options = strings.Join(opts, " ")
}

// readEntries lists the *.conf regular files in ESP/loader/entries, sorted
// by name. Symlinks and other non-regular files are skipped; the root
// keeps every access inside the ESP.
func readEntries(esp *os.Root) ([]Entry, error) {
	d, err := esp.Open(EntriesDir)
	if err != nil {
		return nil, fmt.Errorf("ESP %s: %w", EntriesDir, err)
	}
	defer d.Close()
	des, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("ESP %s: %w", EntriesDir, err)
	}
	var out []Entry
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		e, ok := parseEntryName(de.Name())
		if !ok {
			continue
		}
		f, err := esp.OpenFile(path.Join(EntriesDir, de.Name()), os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("ESP %s/%s: %w", EntriesDir, de.Name(), err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxEntry))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("ESP %s/%s: %w", EntriesDir, de.Name(), err)
		}
		e.parseEntryBody(string(b))
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ReadEntries lists the loader entries of the ESP mounted at dir.
func ReadEntries(dir string) ([]Entry, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readEntries(r)
}

// DefaultEntry emulates systemd-boot's choice of the default entry for
// `default <pattern>` in loader.conf, with no EFI variable overriding it
// (LoaderEntryOneShot, LoaderEntryDefault from bootctl set-default) and
// no key pressed. The rule relied on is systemd-boot 252's (Debian 12),
// src/boot/efi/boot.c config_entry_compare + config_default_entry_select:
//
//  1. entries with no tries left (+0-N, "bad") sort after all others;
//  2. entries with a sort-key sort before those without; between two with
//     a sort-key: by sort-key (strcmp), then machine-id, then version
//     DESCENDING (strverscmp_improved, newest first);
//  3. then by id descending (strverscmp_improved);
//  4. the FIRST entry in that order whose id matches the pattern boots.
//
// Our entries share the sort-key "tabcast" and carry "version <gen>-...",
// so the highest generation that is not bad boots. (systemd-boot before
// 250 sorted the other way round, bad entries first and ascending by id,
// and booted the LAST match; the zero-padded generation in the file name
// gives the same choice there.) The id here is the file name without
// ".conf", lower case.
func DefaultEntry(entries []Entry, pattern string) *Entry {
	idx := make([]int, len(entries))
	for i := range idx {
		idx[i] = i
	}
	id := func(e *Entry) string { return strings.ToLower(strings.TrimSuffix(e.Name, ".conf")) }
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := &entries[idx[i]], &entries[idx[j]]
		if a.Bad() != b.Bad() {
			return !a.Bad()
		}
		if (a.SortKey == "") != (b.SortKey == "") {
			return a.SortKey != ""
		}
		if a.SortKey != "" {
			if a.SortKey != b.SortKey {
				return a.SortKey < b.SortKey
			}
			if r := VersionCompare(a.Version, b.Version); r != 0 {
				return r > 0
			}
		}
		if r := VersionCompare(id(a), id(b)); r != 0 {
			return r > 0
		}
		if !a.Counting || !b.Counting {
			return false
		}
		if a.Left != b.Left {
			return a.Left > b.Left
		}
		return a.Done < b.Done
	})
	for _, i := range idx {
		if ok, _ := path.Match(strings.ToLower(pattern), id(&entries[i])); ok {
			return &entries[i]
		}
	}
	return nil
}

// VersionCompare is systemd's strverscmp_improved: <0, 0, >0.
func VersionCompare(a, b string) int {
	if a == "" || b == "" {
		return strings.Compare(a, b)
	}
	at := func(s string) byte { // *s, NUL at the end
		if s == "" {
			return 0
		}
		return s[0]
	}
	valid := func(c byte) bool {
		return isDigit(c) || isAlpha(c) || c == '~' || c == '-' || c == '^' || c == '.'
	}
	cmpb := func(x, y bool) int { // CMP(x, y) of two C booleans
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	}
	for {
		for a != "" && !valid(a[0]) {
			a = a[1:]
		}
		for b != "" && !valid(b[0]) {
			b = b[1:]
		}
		if at(a) == '~' || at(b) == '~' {
			if r := cmpb(at(a) != '~', at(b) != '~'); r != 0 {
				return r
			}
			a, b = a[1:], b[1:]
		}
		if a == "" || b == "" {
			return strings.Compare(a, b)
		}
		for _, sep := range []byte{'-', '^', '.'} {
			if at(a) == sep || at(b) == sep {
				if r := cmpb(at(a) != sep, at(b) != sep); r != 0 {
					return r
				}
				a, b = a[1:], b[1:]
			}
		}
		var na, nb int
		if isDigit(at(a)) || isDigit(at(b)) {
			for na < len(a) && isDigit(a[na]) {
				na++
			}
			for nb < len(b) && isDigit(b[nb]) {
				nb++
			}
			if r := cmpb(na > 0, nb > 0); r != 0 {
				return r
			}
			da, db := strings.TrimLeft(a[:na], "0"), strings.TrimLeft(b[:nb], "0")
			if r := cmpInt(len(da), len(db)); r != 0 {
				return r
			}
			if r := strings.Compare(da, db); r != 0 {
				return r
			}
		} else {
			for na < len(a) && isAlpha(a[na]) {
				na++
			}
			for nb < len(b) && isAlpha(b[nb]) {
				nb++
			}
			m := min(na, nb)
			if r := strings.Compare(a[:m], b[:m]); r != 0 {
				return r
			}
			if r := cmpInt(na, nb); r != 0 {
				return r
			}
			if na == 0 && nb == 0 && (a == "" || b == "") {
				return strings.Compare(a, b)
			}
		}
		a, b = a[na:], b[nb:]
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rewriteOptions returns opts with root= and tabcast.slot= set for the
// target slot (added when missing) and panic= added when missing: a kernel
// panic, or initramfs-tools failing to find the root, then reboots instead
// of hanging, and the boot counter takes the next boot back to the old
// slot.
func rewriteOptions(opts, partuuid, slot string) string {
	var out []string
	var root, sl, panic bool
	for _, f := range strings.Fields(opts) {
		switch {
		case strings.HasPrefix(f, "root="):
			if root {
				continue
			}
			f, root = "root=PARTUUID="+partuuid, true
		case strings.HasPrefix(f, "tabcast.slot="):
			if sl {
				continue
			}
			f, sl = "tabcast.slot="+slot, true
		case strings.HasPrefix(f, "panic="):
			panic = true
		}
		out = append(out, f)
	}
	if !root {
		out = append([]string{"root=PARTUUID=" + partuuid}, out...)
	}
	if !panic {
		out = append(out, "panic=30")
	}
	if !sl {
		out = append(out, "tabcast.slot="+slot)
	}
	return strings.Join(out, " ")
}

// entryText is a new entry's file.
func entryText(gen int, version, slot, options string) string {
	return fmt.Sprintf(`title      Tabcast %s (slot %s)
version    %0*d-%s
sort-key   %s
linux      /tabcast/%s/vmlinuz
initrd     /tabcast/%s/initrd.img
options    %s
`, version, strings.ToUpper(slot), genWidth, gen, version, SortKey, slot, slot, options)
}

// other is the other slot.
func other(slot string) string {
	if slot == "a" {
		return "b"
	}
	return "a"
}

// validSlot is a or b.
func validSlot(s string) bool { return s == "a" || s == "b" }
