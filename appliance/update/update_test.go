package update

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	uuidA    = "11111111-2222-4333-8444-555555555501"
	uuidB    = "11111111-2222-4333-8444-555555555502"
	slotSize = 8 << 20
)

// fixture is an appliance: two files standing in for the slot partitions,
// a directory for the ESP with slot A installed and booted, a
// by-partuuid directory, a kernel command line, a key pair.
type fixture struct {
	dir, esp, slotA, slotB, cmdline, uuidDir, keyDir string
	priv                                             ed25519.PrivateKey
	keys                                             []PublicKey
	rootfs, kernel, initrd                           string // inputs for Pack
}

const entryA = `title      Tabcast v1 (slot A)
version    0001-v1
sort-key   tabcast
linux      /tabcast/a/vmlinuz
initrd     /tabcast/a/initrd.img
options    root=PARTUUID=` + uuidA + ` rw quiet console=tty0 console=ttyS0,115200 systemd.show_status=auto panic=30 tabcast.slot=a
`

func fill(t *testing.T, path string, size int, seed int64, zeros bool) {
	t.Helper()
	b := make([]byte, size)
	rand.New(rand.NewSource(seed)).Read(b)
	if zeros { // an ext4 image is mostly zeros
		clear(b[size/2:])
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	d := t.TempDir()
	f := &fixture{dir: d, esp: filepath.Join(d, "esp"), slotA: filepath.Join(d, "root-a"), slotB: filepath.Join(d, "root-b"),
		cmdline: filepath.Join(d, "cmdline"), uuidDir: filepath.Join(d, "by-partuuid"), keyDir: filepath.Join(d, "keys"),
		rootfs: filepath.Join(d, "rootfs.ext4"), kernel: filepath.Join(d, "vmlinuz"), initrd: filepath.Join(d, "initrd.img")}
	fill(t, f.slotA, slotSize, 1, false)
	fill(t, f.slotB, slotSize, 2, false)
	fill(t, f.rootfs, 4<<20, 3, true)
	fill(t, f.kernel, 64<<10, 4, false)
	fill(t, f.initrd, 128<<10, 5, false)
	for p, c := range map[string]string{
		"loader/loader.conf":                 "default tabcast-*\ntimeout 0\neditor no\n",
		"loader/entries/tabcast-0001-a.conf": entryA,
		"tabcast/a/vmlinuz":                  "old kernel A",
		"tabcast/a/initrd.img":               "old initrd A",
		"tabcast/b/vmlinuz":                  "stale kernel B",
	} {
		p = filepath.Join(f.esp, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(f.uuidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for u, target := range map[string]string{uuidA: f.slotA, uuidB: f.slotB, "11111111-2222-4333-8444-555555555503": f.cmdline} {
		if err := os.Symlink(target, filepath.Join(f.uuidDir, u)); err != nil {
			t.Fatal(err)
		}
	}
	f.setSlot(t, "a")
	priv, pub, err := GenerateKey(f.keyDir, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.priv, err = LoadPrivateKey(priv); err != nil {
		t.Fatal(err)
	}
	if f.keys, err = LoadPublicKeys(pub); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) setSlot(t *testing.T, slot string) {
	t.Helper()
	u := map[string]string{"a": uuidA, "b": uuidB}[slot]
	if err := os.WriteFile(f.cmdline, []byte("initrd=\\tabcast\\"+slot+"\\initrd.img root=PARTUUID="+u+" rw quiet tabcast.slot="+slot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) opts() Options {
	return Options{ESP: f.esp, Slots: map[string]string{"a": f.slotA, "b": f.slotB}, Cmdline: f.cmdline,
		PartUUIDDir: f.uuidDir, Tries: 1, Current: "auto"}
}

func (f *fixture) pack(t *testing.T, version string) string {
	t.Helper()
	out := filepath.Join(f.dir, version+".tcupdate")
	if _, err := Pack(PackOptions{Key: f.priv, Version: version, RootFS: f.rootfs, Kernel: f.kernel, Initrd: f.initrd,
		Out: out, Created: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) apply(t *testing.T, bundle string) (*Result, error) {
	t.Helper()
	in, err := os.Open(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	return Apply(in, f.keys, f.opts())
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tree is every path under dir with its type and content hash.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type().IsRegular():
			out[rel] = fileSum(t, p)
		default:
			out[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func entryNames(t *testing.T, esp string) []string {
	t.Helper()
	es, err := ReadEntries(esp)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

func defaultName(t *testing.T, esp string) string {
	t.Helper()
	es, err := ReadEntries(esp)
	if err != nil {
		t.Fatal(err)
	}
	if e := DefaultEntry(es, "tabcast-*"); e != nil {
		return e.Name
	}
	return ""
}

func TestApplyRoundTripAndRollback(t *testing.T) {
	f := newFixture(t)
	bundle := f.pack(t, "v2")
	sumA := fileSum(t, f.slotA)
	entryBefore := readFile(t, filepath.Join(f.esp, "loader/entries/tabcast-0001-a.conf"))

	var log bytes.Buffer
	o := f.opts()
	o.Log = &log
	in, _ := os.Open(bundle)
	res, err := Apply(in, f.keys, o)
	in.Close()
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, log.String())
	}
	if res.From != "a" || res.To != "b" || res.Entry != "tabcast-0002-b+1.conf" || res.Wrote != 4<<20 {
		t.Errorf("result %+v", res)
	}
	// Slot B holds the image byte for byte; slot A is untouched.
	img, _ := os.ReadFile(f.rootfs)
	b, _ := os.ReadFile(f.slotB)
	if len(b) != slotSize || !bytes.Equal(b[:len(img)], img) {
		t.Errorf("slot b does not hold the root file system")
	}
	if fileSum(t, f.slotA) != sumA {
		t.Errorf("slot a was written")
	}
	if got := readFile(t, filepath.Join(f.esp, "loader/entries/tabcast-0001-a.conf")); got != entryBefore {
		t.Errorf("slot a's entry changed")
	}
	if readFile(t, filepath.Join(f.esp, "tabcast/a/vmlinuz")) != "old kernel A" || readFile(t, filepath.Join(f.esp, "tabcast/a/initrd.img")) != "old initrd A" {
		t.Errorf("slot a's kernel or initrd changed")
	}
	if fileSum(t, filepath.Join(f.esp, "tabcast/b/vmlinuz")) != fileSum(t, f.kernel) ||
		fileSum(t, filepath.Join(f.esp, "tabcast/b/initrd.img")) != fileSum(t, f.initrd) {
		t.Errorf("slot b's kernel or initrd not written")
	}
	want := `title      Tabcast v2 (slot B)
version    0002-v2
sort-key   tabcast
linux      /tabcast/b/vmlinuz
initrd     /tabcast/b/initrd.img
options    root=PARTUUID=` + uuidB + ` rw quiet console=tty0 console=ttyS0,115200 systemd.show_status=auto panic=30 tabcast.slot=b
`
	if got := readFile(t, filepath.Join(f.esp, "loader/entries/tabcast-0002-b+1.conf")); got != want {
		t.Errorf("entry:\n%s\nwant:\n%s", got, want)
	}
	if got := strings.Join(entryNames(t, f.esp), " "); got != "tabcast-0001-a.conf tabcast-0002-b+1.conf" {
		t.Errorf("entries: %s", got)
	}
	// No temp files left on the ESP.
	for p := range tree(t, f.esp) {
		if strings.Contains(p, ".tmp") {
			t.Errorf("left behind: %s", p)
		}
	}
	for _, s := range []string{"signed by key " + KeyID(f.keys[0].Key), "writing slot b", "boot entry tabcast-0002-b+1.conf written"} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, log.String())
		}
	}

	// systemd-boot boots the new entry next.
	if got := defaultName(t, f.esp); got != "tabcast-0002-b+1.conf" {
		t.Errorf("next boot: %s", got)
	}
	// Its one try is used (sd-boot renames +1 to +0-1 when it boots it),
	// the slot never becomes ready, so nothing blesses it: the next boot
	// falls back to slot A.
	entries := filepath.Join(f.esp, "loader/entries")
	if err := os.Rename(filepath.Join(entries, "tabcast-0002-b+1.conf"), filepath.Join(entries, "tabcast-0002-b+0-1.conf")); err != nil {
		t.Fatal(err)
	}
	if got := defaultName(t, f.esp); got != "tabcast-0001-a.conf" {
		t.Errorf("after the failed try: next boot %s, want tabcast-0001-a.conf", got)
	}
	st, err := ReadStatus(f.opts())
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != "a" || st.Default.Name != "tabcast-0001-a.conf" || !strings.HasPrefix(st.SlotEntries("b")[0].State(), "bad") {
		t.Errorf("status %+v", st)
	}

	// Instead: the try succeeds and systemd-bless-boot drops the counter.
	if err := os.Rename(filepath.Join(entries, "tabcast-0002-b+0-1.conf"), filepath.Join(entries, "tabcast-0002-b.conf")); err != nil {
		t.Fatal(err)
	}
	if got := defaultName(t, f.esp); got != "tabcast-0002-b.conf" {
		t.Errorf("after blessing: next boot %s", got)
	}
	// Now running B, the next update goes to slot A, generation 3, and
	// replaces A's entry.
	f.setSlot(t, "b")
	sumB := fileSum(t, f.slotB)
	fill(t, f.rootfs, 3<<20, 6, true)
	bundle3 := f.pack(t, "v3")
	res, err = f.apply(t, bundle3)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != "b" || res.To != "a" || res.Entry != "tabcast-0003-a+1.conf" || len(res.Removed) != 1 || res.Removed[0] != "tabcast-0001-a.conf" {
		t.Errorf("second update: %+v", res)
	}
	if got := strings.Join(entryNames(t, f.esp), " "); got != "tabcast-0002-b.conf tabcast-0003-a+1.conf" {
		t.Errorf("entries: %s", got)
	}
	if fileSum(t, f.slotB) != sumB {
		t.Errorf("the running slot b was written")
	}
	e := readFile(t, filepath.Join(entries, "tabcast-0003-a+1.conf"))
	if !strings.Contains(e, "root=PARTUUID="+uuidA+" ") || !strings.HasSuffix(e, "tabcast.slot=a\n") || !strings.Contains(e, "version    0003-v3\n") {
		t.Errorf("entry for a:\n%s", e)
	}
	if got := defaultName(t, f.esp); got != "tabcast-0003-a+1.conf" {
		t.Errorf("next boot %s", got)
	}
}

// member is one tar member of a test bundle.
type member struct {
	name string
	data []byte
}

func readMembers(t *testing.T, path string) []member {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tr := tar.NewReader(fh)
	var out []member
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, member{hdr.Name, b})
	}
}

func writeMembers(t *testing.T, path string, ms []member) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(m.data)
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) resign(t *testing.T, ms []member, edit func(*Manifest)) []member {
	t.Helper()
	var m Manifest
	if err := json.Unmarshal(ms[0].data, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	mj, _ := json.Marshal(m)
	out := append([]member{{MemberMan, mj}, {MemberSig, ed25519.Sign(f.priv, mj)}}, ms[2:]...)
	return out
}

func TestApplyRefusals(t *testing.T) {
	f := newFixture(t)
	outer := f
	good := f.pack(t, "v2")
	ms := readMembers(t, good)
	if len(ms) != 5 || ms[0].name != MemberMan || ms[1].name != MemberSig || ms[2].name != MemberRootFS {
		t.Fatalf("bundle members: %v", ms)
	}
	_, otherKey, _ := ed25519.GenerateKey(nil)
	clone := func() []member {
		out := make([]member, len(ms))
		for i, m := range ms {
			out[i] = member{m.name, bytes.Clone(m.data)}
		}
		return out
	}
	raw, _ := os.ReadFile(good)

	for _, tc := range []struct {
		name string
		make func(path string)
		want string
		// before: refused before anything was written (slot b and the
		// whole ESP untouched too).
		before bool
	}{
		{"bad signature", func(p string) {
			m := clone()
			m[1].data[0] ^= 1
			writeMembers(t, p, m)
		}, "signature does not verify with any trusted key", true},
		{"untrusted key", func(p string) {
			m := clone()
			m[1].data = ed25519.Sign(otherKey, m[0].data)
			writeMembers(t, p, m)
		}, "signature does not verify with any trusted key", true},
		{"manifest changed after signing", func(p string) {
			m := clone()
			m[0].data = bytes.Replace(m[0].data, []byte(`"v2"`), []byte(`"v9"`), 1)
			writeMembers(t, p, m)
		}, "signature does not verify", true},
		{"no signature", func(p string) {
			m := clone()
			writeMembers(t, p, append(m[:1], m[2:]...))
		}, `member "rootfs.img.gz" where manifest.sig belongs`, true},
		{"wrong order", func(p string) {
			m := clone()
			m[0], m[1] = m[1], m[0]
			writeMembers(t, p, m)
		}, `member "manifest.sig" where manifest.json belongs`, true},
		{"payloads out of order", func(p string) {
			m := clone()
			m[2], m[3] = m[3], m[2]
			writeMembers(t, p, m)
		}, `member "vmlinuz" where rootfs.img.gz belongs`, true},
		{"oversize manifest", func(p string) {
			m := clone()
			m[0].data = append(m[0].data, bytes.Repeat([]byte(" "), MaxManifest)...)
			m[1].data = ed25519.Sign(f.priv, m[0].data)
			writeMembers(t, p, m)
		}, "manifest.json is 66220 bytes, more than the 65536 allowed", true},
		{"unknown format", func(p string) {
			writeMembers(t, p, f.resign(t, clone(), func(m *Manifest) { m.Format = 2 }))
		}, "manifest.json: format 2, this tabcast reads format 1", true},
		{"not tabcast", func(p string) {
			writeMembers(t, p, f.resign(t, clone(), func(m *Manifest) { m.Product = "other" }))
		}, `product "other"`, true},
		{"bad version", func(p string) {
			writeMembers(t, p, f.resign(t, clone(), func(m *Manifest) { m.Version = "v2\noptions init=/bin/sh" }))
		}, "is not a valid version", true},
		{"truncated in the manifest", func(p string) {
			os.WriteFile(p, raw[:700], 0o644)
		}, "manifest.json", true},
		{"rootfs too big for the slot", func(p string) {
			writeMembers(t, p, f.resign(t, clone(), func(m *Manifest) { m.Files[0].UncompressedSize = slotSize + 1 }))
		}, "does not fit slot b", true},
		{"truncated in the rootfs", func(p string) {
			os.WriteFile(p, raw[:len(raw)/3], 0o644)
		}, "unexpected EOF", false},
		{"tampered rootfs", func(p string) {
			m := clone()
			m[2].data[len(m[2].data)/2] ^= 0x40
			writeMembers(t, p, m)
		}, "rootfs.img.gz", false},
		{"rootfs image does not match", func(p string) {
			writeMembers(t, p, f.resign(t, clone(), func(m *Manifest) { m.Files[0].UncompressedSHA256 = strings.Repeat("0", 64) }))
		}, "the image's sha256 is", false},
		{"tampered kernel", func(p string) {
			m := clone()
			m[3].data[10] ^= 1
			writeMembers(t, p, m)
		}, "vmlinuz: sha256", false},
		{"extra member", func(p string) {
			writeMembers(t, p, append(clone(), member{"evil.sh", []byte("x")}))
		}, `unexpected member "evil.sh"`, false},
		{"path member", func(p string) {
			m := clone()
			m[4].name = "../initrd.img"
			writeMembers(t, p, m)
		}, `member "../initrd.img" where initrd.img belongs`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.priv, f.keys = outer.priv, outer.keys
			bad := filepath.Join(f.dir, "bad.tcupdate")
			tc.make(bad)
			sumA, sumB, esp := fileSum(t, f.slotA), fileSum(t, f.slotB), tree(t, f.esp)
			_, err := f.apply(t, bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if NothingWritten(err) != tc.before || strings.HasSuffix(err.Error(), "nothing was written") != tc.before {
				t.Errorf("nothing written: %v, want %v (%v)", NothingWritten(err), tc.before, err)
			}
			if fileSum(t, f.slotA) != sumA {
				t.Errorf("slot a was written")
			}
			if tc.before {
				if fileSum(t, f.slotB) != sumB {
					t.Errorf("slot b was written")
				}
				if got := tree(t, f.esp); !maps.Equal(got, esp) {
					t.Errorf("ESP changed:\n%v\nwant\n%v", got, esp)
				}
				return
			}
			if !strings.Contains(err.Error(), "slot b has no boot entry, the running slot a is untouched") {
				t.Errorf("message: %v", err)
			}
			// Slot a's entry, kernel and initrd are as they were; slot b
			// has no entry; no temp file is left.
			got := tree(t, f.esp)
			for p, sum := range esp {
				if strings.HasPrefix(p, "tabcast/b/") {
					continue
				}
				if got[p] != sum {
					t.Errorf("%s changed", p)
				}
			}
			for p := range got {
				if strings.Contains(p, ".tmp") {
					t.Errorf("left behind: %s", p)
				}
			}
			if names := strings.Join(entryNames(t, f.esp), " "); names != "tabcast-0001-a.conf" {
				t.Errorf("entries: %s", names)
			}
			if got := defaultName(t, f.esp); got != "tabcast-0001-a.conf" {
				t.Errorf("next boot %s", got)
			}
		})
	}
}

// sdBoot emulates one boot: systemd-boot picks DefaultEntry and, when the
// entry has tries left, renames it with one try less and one more done
// before starting it (its boot counting). It returns the slot booted and
// the entry's name after the rename.
func sdBoot(t *testing.T, esp string) (slot, name string) {
	t.Helper()
	es, err := ReadEntries(esp)
	if err != nil {
		t.Fatal(err)
	}
	e := DefaultEntry(es, "tabcast-*")
	if e == nil {
		t.Fatal("nothing to boot")
	}
	name = e.Name
	if e.Counting && e.Left > 0 {
		name = e.ID + "+" + itoa(e.Left-1) + "-" + itoa(e.Done+1) + ".conf"
		dir := filepath.Join(esp, EntriesDir)
		if err := os.Rename(filepath.Join(dir, e.Name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return e.Slot, name
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestBootCountingRollback: a new slot with two tries that never becomes
// ready (nothing blesses it) boots twice, then the old slot boots again and
// keeps booting; a new slot that becomes ready is blessed and stays.
func TestBootCountingRollback(t *testing.T) {
	f := newFixture(t)
	bundle := f.pack(t, "v2")
	o := f.opts()
	o.Tries = 2
	in, _ := os.Open(bundle)
	res, err := Apply(in, f.keys, o)
	in.Close()
	if err != nil || res.Entry != "tabcast-0002-b+2.conf" {
		t.Fatalf("apply: %v %+v", err, res)
	}
	var got []string
	for i := 0; i < 4; i++ {
		slot, name := sdBoot(t, f.esp)
		got = append(got, slot+":"+name)
	}
	want := "b:tabcast-0002-b+1-1.conf b:tabcast-0002-b+0-2.conf a:tabcast-0001-a.conf a:tabcast-0001-a.conf"
	if strings.Join(got, " ") != want {
		t.Errorf("boots: %v\nwant %s", got, want)
	}

	// Healthy: the first boot is blessed (systemd-bless-boot drops the
	// counter) and slot b stays.
	g := newFixture(t)
	g.priv, g.keys = f.priv, f.keys
	if _, err := g.apply(t, bundle); err != nil {
		t.Fatal(err)
	}
	slot, name := sdBoot(t, g.esp)
	if slot != "b" || name != "tabcast-0002-b+0-1.conf" {
		t.Fatalf("first boot: %s %s", slot, name)
	}
	dir := filepath.Join(g.esp, EntriesDir)
	os.Rename(filepath.Join(dir, name), filepath.Join(dir, "tabcast-0002-b.conf"))
	for i := 0; i < 2; i++ {
		if slot, name := sdBoot(t, g.esp); slot != "b" || name != "tabcast-0002-b.conf" {
			t.Errorf("boot after blessing: %s %s", slot, name)
		}
	}
}
