package cdpproxy

import (
	"testing"

	"github.com/tabcast/tabcast/core/errcode"
)

// TestAdmit: at most MaxConnections per session, places given back once.
func TestAdmit(t *testing.T) {
	sv := New(Config{MaxConnections: 2}, nil, nil, Deps{})
	r1, err := sv.Admit("a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := sv.Admit("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sv.Admit("a"); errcode.CodeOf(err) != errcode.TooManyConnections {
		t.Fatalf("third connection: %v, want too_many_connections", err)
	}
	if r, err := sv.Admit("b"); err != nil {
		t.Fatalf("another session: %v", err)
	} else {
		r()
	}
	r1()
	r1() // idempotent: gives back one place, not two
	r3, err := sv.Admit("a")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := sv.Admit("a"); errcode.CodeOf(err) != errcode.TooManyConnections {
		t.Fatalf("a double release gave back two places: %v", err)
	}
	r2()
	r3()
	if len(sv.conns) != 0 {
		t.Fatalf("places left: %v", sv.conns)
	}
}
