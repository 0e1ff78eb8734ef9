package update

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"0002-v1", "0001-v9", 1},
		{"0010-a", "0009-z", 1},
		{"0002-v2", "0002-v2", 0},
		{"1.10", "1.9", 1},
		{"1~rc1", "1", -1},
		{"1-2", "1.2", -1},
		{"abc", "abd", -1},
		{"123a", "123.a", 1},
		{"tabcast-0002-b+1", "tabcast-0001-a", 1},
		{"", "1", -1},
		{"v1", "v1.1", -1},
	} {
		got := VersionCompare(c.a, c.b)
		if sign(got) != c.want || sign(VersionCompare(c.b, c.a)) != -c.want {
			t.Errorf("VersionCompare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestParseEntryName(t *testing.T) {
	for _, c := range []struct {
		name       string
		slot       string
		gen        int
		counting   bool
		left, done int
		ok, bad    bool
	}{
		{"tabcast-0001-a+3.conf", "a", 1, true, 3, 0, true, false},
		{"tabcast-0002-b+0-1.conf", "b", 2, true, 0, 1, true, true},
		{"tabcast-0002-b+2-1.conf", "b", 2, true, 2, 1, true, false},
		{"tabcast-0012-a.conf", "a", 12, false, 0, 0, true, false},
		{"tabcast-a+3.conf", "a", 0, true, 3, 0, true, false}, // before generations
		{"tabcast-b.conf", "b", 0, false, 0, 0, true, false},
		{"other+1.conf", "", 0, true, 1, 0, true, false},
		{"tabcast-0001-c.conf", "", 0, false, 0, 0, true, false},
		{"tabcast-0001-a+x.conf", "", 0, false, 0, 0, true, false},
		{"tabcast-0001-a.txt", "", 0, false, 0, 0, false, false},
	} {
		e, ok := parseEntryName(c.name)
		if ok != c.ok || e.Slot != c.slot || e.Gen != c.gen || e.Counting != c.counting || e.Left != c.left || e.Done != c.done || e.Bad() != c.bad {
			t.Errorf("%s: %+v ok=%v", c.name, e, ok)
		}
	}
	if n := EntryName(3, "a", 1); n != "tabcast-0003-a+1.conf" {
		t.Errorf("EntryName: %s", n)
	}
}

func entry(name, version, sortKey string) Entry {
	e, _ := parseEntryName(name)
	e.Version, e.SortKey = version, sortKey
	return e
}

func TestDefaultEntry(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"newest generation", []Entry{entry("tabcast-0001-a.conf", "0001-v1", "tabcast"), entry("tabcast-0002-b+1.conf", "0002-v2", "tabcast")}, "tabcast-0002-b+1.conf"},
		{"bad falls back", []Entry{entry("tabcast-0001-a.conf", "0001-v1", "tabcast"), entry("tabcast-0002-b+0-1.conf", "0002-v2", "tabcast")}, "tabcast-0001-a.conf"},
		// The version string of the release does not matter, the generation does.
		{"older release newer generation", []Entry{entry("tabcast-0003-a+1.conf", "0003-v1.0", "tabcast"), entry("tabcast-0002-b.conf", "0002-v9.9", "tabcast")}, "tabcast-0003-a+1.conf"},
		{"initial image with copy of b", []Entry{entry("tabcast-0001-a+3.conf", "0001-v1", "tabcast"), entry("tabcast-0000-b+3.conf", "0000-v1", "tabcast")}, "tabcast-0001-a+3.conf"},
		{"trial on b, a bad", []Entry{entry("tabcast-0003-a+0-1.conf", "0003-v3", "tabcast"), entry("tabcast-0002-b.conf", "0002-v2", "tabcast")}, "tabcast-0002-b.conf"},
		{"from an image before generations", []Entry{entry("tabcast-a.conf", "v1", "tabcast-a"), entry("tabcast-0001-b+1.conf", "0001-v2", "tabcast")}, "tabcast-0001-b+1.conf"},
		{"rollback to an image before generations", []Entry{entry("tabcast-a.conf", "v1", "tabcast-a"), entry("tabcast-0001-b+0-1.conf", "0001-v2", "tabcast")}, "tabcast-a.conf"},
		{"all bad: still boots something", []Entry{entry("tabcast-0001-a+0-3.conf", "0001-v1", "tabcast")}, "tabcast-0001-a+0-3.conf"},
		{"pattern", []Entry{entry("zzz.conf", "9999", "tabcast"), entry("tabcast-0001-a.conf", "0001-v1", "tabcast")}, "tabcast-0001-a.conf"},
	} {
		got := DefaultEntry(c.entries, "tabcast-*")
		if got == nil || got.Name != c.want {
			t.Errorf("%s: %v, want %s", c.name, got, c.want)
		}
		// systemd-boot before 250: bad entries first, ascending by file
		// name, the last match boots; our names give the same choice.
		if c.name == "from an image before generations" || c.name == "rollback to an image before generations" || c.name == "pattern" {
			continue
		}
		var last string
		for _, bad := range []bool{true, false} {
			for _, e := range sortedByName(c.entries) {
				if e.Bad() == bad {
					last = e.Name
				}
			}
		}
		if last != c.want && c.name != "all bad: still boots something" {
			t.Errorf("%s: systemd-boot <250 rule picks %s, want %s", c.name, last, c.want)
		}
	}
}

func sortedByName(es []Entry) []Entry {
	out := append([]Entry(nil), es...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if VersionCompare(out[j].Name, out[i].Name) < 0 {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestRewriteOptions(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"root=PARTUUID=aaa rw quiet panic=30 tabcast.slot=a", "root=PARTUUID=bbb rw quiet panic=30 tabcast.slot=b"},
		{"rw quiet", "root=PARTUUID=bbb rw quiet panic=30 tabcast.slot=b"},
		{"root=/dev/sda2 root=/dev/sda3 tabcast.slot=a tabcast.slot=a panic=5", "root=PARTUUID=bbb tabcast.slot=b panic=5"},
	} {
		if got := rewriteOptions(c.in, "bbb", "b"); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

func TestKeys(t *testing.T) {
	dir := t.TempDir()
	priv, pub, err := GenerateKey(dir, "test key")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(priv); st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v", st.Mode().Perm())
	}
	if _, _, err := GenerateKey(dir, ""); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second keygen: %v", err)
	}
	sk, err := LoadPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := LoadPublicKeys(pub)
	if err != nil || len(keys) != 1 || !keys[0].Key.Equal(sk.Public()) || keys[0].Comment != "test key" {
		t.Fatalf("public keys %+v %v", keys, err)
	}
	os.Chmod(priv, 0o640)
	_, err = LoadPrivateKey(priv)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable key: %v", err)
	}
	b, _ := os.ReadFile(priv)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if secret := lines[len(lines)-1]; strings.Contains(err.Error(), secret) {
		t.Errorf("error shows the key")
	}
	// Rotation: two keys, comments, blank lines.
	_, pub2, _ := GenerateKey(filepath.Join(dir, "new"), "")
	b1, _ := os.ReadFile(pub)
	b2, _ := os.ReadFile(pub2)
	multi := filepath.Join(dir, "multi.pub")
	os.WriteFile(multi, []byte("# old key\n"+string(b1)+"\n\t\n"+string(b2)), 0o644)
	if keys, err := LoadPublicKeys(multi); err != nil || len(keys) != 2 {
		t.Errorf("two keys: %v %v", keys, err)
	}
	os.WriteFile(multi, []byte("not-a-key\n"), 0o644)
	if _, err := LoadPublicKeys(multi); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad key: %v", err)
	}
	os.WriteFile(multi, []byte("# nothing\n"), 0o644)
	if _, err := LoadPublicKeys(multi); err == nil || !strings.Contains(err.Error(), "no key") {
		t.Errorf("no key: %v", err)
	}
}

// TestApplyKeyRotation: a bundle signed with the second of two trusted keys.
func TestApplyKeyRotation(t *testing.T) {
	f := newFixture(t)
	bundle := f.pack(t, "v2")
	_, pub2, _ := GenerateKey(filepath.Join(f.dir, "other"), "")
	k2, _ := LoadPublicKeys(pub2)
	f.keys = append(k2, f.keys...)
	if _, err := f.apply(t, bundle); err != nil {
		t.Fatal(err)
	}
}

func TestApplyRefusesWithoutFallback(t *testing.T) {
	f := newFixture(t)
	bundle := f.pack(t, "v2")
	entries := filepath.Join(f.esp, "loader/entries")
	// The running entry is still on trial.
	os.Rename(filepath.Join(entries, "tabcast-0001-a.conf"), filepath.Join(entries, "tabcast-0001-a+2-1.conf"))
	sumB := fileSum(t, f.slotB)
	if _, err := f.apply(t, bundle); err == nil || !strings.Contains(err.Error(), "is not marked good yet") || !NothingWritten(err) {
		t.Errorf("trial: %v", err)
	}
	// No entry for the running slot at all.
	os.Remove(filepath.Join(entries, "tabcast-0001-a+2-1.conf"))
	if _, err := f.apply(t, bundle); err == nil || !strings.Contains(err.Error(), "no usable boot entry for the running slot a") {
		t.Errorf("no entry: %v", err)
	}
	// No tabcast.slot= and no --current.
	os.WriteFile(f.cmdline, []byte("root=/dev/sda2 rw\n"), 0o644)
	if _, err := f.apply(t, bundle); err == nil || !strings.Contains(err.Error(), "cannot tell the running slot") {
		t.Errorf("no slot: %v", err)
	}
	if fileSum(t, f.slotB) != sumB {
		t.Errorf("slot b was written")
	}
}

// TestApplyStaysInTheESP: a symlink out of the ESP is not followed.
func TestApplyStaysInTheESP(t *testing.T) {
	f := newFixture(t)
	bundle := f.pack(t, "v2")
	outside := filepath.Join(f.dir, "outside")
	os.Mkdir(outside, 0o755)
	os.RemoveAll(filepath.Join(f.esp, "tabcast/b"))
	if err := os.Symlink(outside, filepath.Join(f.esp, "tabcast/b")); err != nil {
		t.Fatal(err)
	}
	_, err := f.apply(t, bundle)
	if err == nil || !NothingWritten(err) {
		t.Fatalf("apply through a symlink: %v", err)
	}
	if des, _ := os.ReadDir(outside); len(des) != 0 {
		t.Errorf("wrote outside the ESP: %v", des)
	}
}

func TestVerify(t *testing.T) {
	f := newFixture(t)
	bundle := f.pack(t, "v2")
	in, _ := os.Open(bundle)
	defer in.Close()
	m, signer, err := Verify(in, f.keys)
	if err != nil || m.Version != "v2" || !signer.Key.Equal(f.keys[0].Key) {
		t.Fatalf("verify: %+v %v", m, err)
	}
	if m.File(MemberRootFS).UncompressedSize != 4<<20 || m.Created.Unix() != 1700000000 {
		t.Errorf("manifest %+v", m)
	}
}

func TestDiskOf(t *testing.T) {
	sys := t.TempDir()
	for _, d := range []string{"devices/pci0/virtio2/block/vda/vda3", "devices/pci0/virtio2/block/vda/vda2", "devices/usb/block/sdb/sdb3", "devices/virtual/block/dm-0"} {
		os.MkdirAll(filepath.Join(sys, d), 0o755)
		if strings.Contains(filepath.Base(d), "da") || strings.HasPrefix(filepath.Base(d), "sdb") {
			os.WriteFile(filepath.Join(sys, d, "partition"), []byte("3\n"), 0o644)
		}
	}
	os.MkdirAll(filepath.Join(sys, "dev/block"), 0o755)
	for l, target := range map[string]string{"253:3": "vda/vda3", "253:2": "vda/vda2", "8:19": "sdb/sdb3"} {
		base := "../../devices/pci0/virtio2/block/"
		if strings.HasPrefix(target, "sdb") {
			base = "../../devices/usb/block/"
		}
		os.Symlink(base+target, filepath.Join(sys, "dev/block", l))
	}
	os.Symlink("../../devices/virtual/block/dm-0", filepath.Join(sys, "dev/block/254:0"))
	mk := func(maj, min uint64) uint64 { return maj<<8 | min }
	for dev, want := range map[uint64]string{mk(253, 3): "vda", mk(253, 2): "vda", mk(8, 19): "sdb", mk(254, 0): "", mk(1, 1): ""} {
		if got := diskOf(sys, dev); got != want {
			t.Errorf("diskOf(%d:%d) = %q, want %q", unixMajor(dev), unixMinor(dev), got, want)
		}
	}
}
