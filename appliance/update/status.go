package update

import (
	"io"
	"os"
	"path"
	"strings"
)

// Status is the A/B state as the ESP and the kernel command line show it.
type Status struct {
	Current    string // running slot, "" when unknown
	CurrentErr string
	Pattern    string // loader.conf "default"
	Entries    []Entry
	Default    *Entry // what systemd-boot boots next (DefaultEntry)
}

// SlotEntries are the entries of one slot, newest first.
func (s *Status) SlotEntries(slot string) []Entry {
	var out []Entry
	for i := len(s.Entries) - 1; i >= 0; i-- {
		if s.Entries[i].Slot == slot {
			out = append(out, s.Entries[i])
		}
	}
	return out
}

// ReadStatus reads the ESP's loader.conf and entries.
func ReadStatus(o Options) (*Status, error) {
	st := &Status{Pattern: "tabcast-*"}
	if cur, err := CurrentSlot(o); err == nil {
		st.Current = cur
	} else {
		st.CurrentErr = err.Error()
	}
	esp, err := os.OpenRoot(o.ESP)
	if err != nil {
		return nil, err
	}
	defer esp.Close()
	if f, err := esp.Open(path.Join("loader", "loader.conf")); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, maxEntry))
		f.Close()
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) >= 2 && fs[0] == "default" {
				st.Pattern = fs[1]
			}
		}
	}
	if st.Entries, err = readEntries(esp); err != nil {
		return nil, err
	}
	st.Default = DefaultEntry(st.Entries, st.Pattern)
	return st, nil
}

// Fallback is the entry systemd-boot would boot if the running slot's
// entry went bad: the newest entry of the other slot that is not bad, or
// nil.
func (s *Status) Fallback() *Entry {
	if s.Current == "" {
		return nil
	}
	var others []Entry
	for _, e := range s.Entries {
		if e.Slot != "" && e.Slot != s.Current && !e.Bad() {
			others = append(others, e)
		}
	}
	return DefaultEntry(others, s.Pattern)
}
