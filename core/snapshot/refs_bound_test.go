package snapshot

import (
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

type keyPage string

func (k keyPage) Target() *chromedp.Target { return &chromedp.Target{TargetID: target.ID(k)} }

// TestSnapshotterBound: pages that closed unseen (a popup that closed
// itself) do not pile up: past maxPages the least recently used table goes,
// and one still in use stays.
func TestSnapshotterBound(t *testing.T) {
	s := NewSnapshotter()
	keep := s.Refs(keyPage("keep"))
	for i := 0; i < 3*maxPages; i++ {
		s.Refs(keyPage(fmt.Sprint("popup-", i)))
		if i%50 == 0 {
			s.Refs(keyPage("keep")) // in use all along
		}
	}
	if n := len(s.pages); n != maxPages || len(s.used) != maxPages {
		t.Fatalf("%d tables (%d use marks), want %d", n, len(s.used), maxPages)
	}
	if s.Refs(keyPage("keep")) != keep {
		t.Fatal("the table in use was evicted")
	}
	if _, ok := s.pages["popup-0"]; ok {
		t.Fatal("the oldest unused table is still kept")
	}
	s.Forget(keyPage("keep"))
	if _, ok := s.used["keep"]; ok {
		t.Fatal("Forget left the table's use mark")
	}
}
