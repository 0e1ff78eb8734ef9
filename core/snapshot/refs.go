package snapshot

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/chromedp/cdproto/cdp"
	"github.com/tabcast/tabcast/core/errcode"
)

// Resolve resolves a ref of this snapshot: see Refs.Resolve.
func (s *Snapshot) Resolve(ctx context.Context, ref string, currentRevision int64) (*Element, error) {
	el, err := s.lookup(ref, currentRevision)
	if err != nil {
		return nil, err
	}
	if err := el.check(ctx); err != nil {
		return nil, err
	}
	return el, nil
}

// lookup is Resolve without the check that the node is still in its
// document (no CDP call).
func (s *Snapshot) lookup(ref string, currentRevision int64) (*Element, error) {
	if s == nil {
		return nil, staleRef(ref, "no snapshot was taken", nil)
	}
	e, ok := s.refs[ref]
	if !ok {
		if !validRef(ref) {
			return nil, newErr(errcode.InvalidArgument, `refs look like "e12"`, "malformed ref %q", ref)
		}
		return nil, staleRef(ref, "not in the latest snapshot", nil)
	}
	if e.rev != currentRevision {
		return nil, staleRef(ref, "the page navigated since the snapshot (revision "+strconv.FormatInt(e.rev, 10)+" → "+strconv.FormatInt(currentRevision, 10)+")", nil)
	}
	return &Element{Ref: ref, BackendNodeID: e.backend, FrameID: e.frame.id, Session: e.frame.sess, frame: e.frame,
		entry: e, objects: &s.objects}, nil
}

func validRef(ref string) bool {
	ref = trimAt(ref)
	if len(ref) < 2 || ref[0] != 'e' {
		return false
	}
	_, err := strconv.Atoi(ref[1:])
	return err == nil
}

func trimAt(ref string) string {
	if len(ref) > 0 && ref[0] == '@' {
		return ref[1:]
	}
	return ref
}

// Refs is the ref table of one page: only the refs of the latest stored
// snapshot are valid (storing a snapshot drops the previous table, so the
// table is bounded by MaxNodes). It is safe for concurrent use; the zero
// value is ready.
type Refs struct {
	mu   sync.Mutex
	snap *Snapshot
}

// Set makes s the latest snapshot; the JS objects the previous one's refs
// were resolved to are released.
func (r *Refs) Set(s *Snapshot) {
	r.mu.Lock()
	old := r.snap
	r.snap = s
	r.mu.Unlock()
	if old != nil && old != s {
		old.objects.release()
	}
}

// Clear drops the table (every ref becomes stale).
func (r *Refs) Clear() { r.Set(nil) }

// Latest is the latest stored snapshot (nil if none).
func (r *Refs) Latest() *Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap
}

// Take takes a snapshot of p (resolving Options.Ref against the current
// table) and stores it.
func (r *Refs) Take(ctx context.Context, p Page, o Options) (*Snapshot, error) {
	if o.Ref != "" && o.Within == nil {
		el, err := r.Resolve(ctx, o.Ref, o.Revision)
		if err != nil {
			return nil, err
		}
		o.Within = el
	}
	s, err := Take(ctx, p, o)
	if err != nil {
		return nil, err
	}
	r.Set(s)
	return s, nil
}

// Resolve returns the element of ref ("e3" or "@e3") in the latest
// snapshot. It fails with errcode.StaleRef when the snapshot was taken at
// another page revision, the ref is unknown, or the node is gone or
// detached from its document (a re-rendered element is a new node: the old
// ref never resolves to it).
func (r *Refs) Resolve(ctx context.Context, ref string, currentRevision int64) (*Element, error) {
	return r.Latest().Resolve(ctx, trimAt(ref), currentRevision)
}

// Lookup is Resolve without checking that the node is still in its
// document, saving a round trip for a caller whose next operation checks
// it anyway: every Element method and ClickPoint fail with errcode.StaleRef
// on a node that is gone or detached, before they act.
func (r *Refs) Lookup(ref string, currentRevision int64) (*Element, error) {
	return r.Latest().lookup(trimAt(ref), currentRevision)
}

// Snapshotter holds a Refs per page (keyed by target id). Call Forget when
// a page closes; a page that closed unseen (a popup that closed itself) is
// dropped once maxPages tables exist, least recently used first.
type Snapshotter struct {
	mu    sync.Mutex
	pages map[string]*Refs
	used  map[string]uint64 // when each table was last asked for, in ticks
	tick  uint64
}

// maxPages bounds the tables a Snapshotter keeps.
const maxPages = 256

// NewSnapshotter returns an empty Snapshotter.
func NewSnapshotter() *Snapshotter { return &Snapshotter{pages: map[string]*Refs{}} }

// Refs returns the table of p, creating it.
func (s *Snapshotter) Refs(p Page) *Refs {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pages == nil {
		s.pages = map[string]*Refs{}
	}
	if s.used == nil {
		s.used = map[string]uint64{}
	}
	k := pageKey(p)
	r := s.pages[k]
	if r == nil {
		if len(s.pages) >= maxPages {
			s.evictLocked()
		}
		r = &Refs{}
		s.pages[k] = r
	}
	s.tick++
	s.used[k] = s.tick
	return r
}

// evictLocked drops the least recently used table.
func (s *Snapshotter) evictLocked() {
	var oldest string
	for k, t := range s.used {
		if oldest == "" || t < s.used[oldest] {
			oldest = k
		}
	}
	delete(s.pages, oldest)
	delete(s.used, oldest)
}

// Take snapshots p and makes it p's latest snapshot.
func (s *Snapshotter) Take(ctx context.Context, p Page, o Options) (*Snapshot, error) {
	return s.Refs(p).Take(ctx, p, o)
}

// Resolve resolves ref against p's latest snapshot.
func (s *Snapshotter) Resolve(ctx context.Context, p Page, ref string, currentRevision int64) (*Element, error) {
	return s.Refs(p).Resolve(ctx, ref, currentRevision)
}

// Lookup looks ref up in p's latest snapshot without a CDP call: see
// Refs.Lookup.
func (s *Snapshotter) Lookup(p Page, ref string, currentRevision int64) (*Element, error) {
	return s.Refs(p).Lookup(ref, currentRevision)
}

// Forget drops p's table.
func (s *Snapshotter) Forget(p Page) {
	s.mu.Lock()
	delete(s.pages, pageKey(p))
	delete(s.used, pageKey(p))
	s.mu.Unlock()
}

// objectGroup is a snapshot's CDP object group: where its refs' JS objects
// live, in every session (page or OOPIF) one was resolved in, until the
// snapshot is replaced.
type objectGroup struct {
	mu       sync.Mutex
	name     string
	sessions []cdp.Session
	released bool
}

// use returns the group's name for an object about to be made in sess, or
// "" once released (the caller then uses a throwaway group).
func (g *objectGroup) use(sess cdp.Session) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return ""
	}
	if g.name == "" {
		g.name = "tabcast-refs-" + strconv.FormatInt(groupSeq.Add(1), 10)
	}
	if !slices.Contains(g.sessions, sess) {
		g.sessions = append(g.sessions, sess)
	}
	return g.name
}

// release frees the group in every session it was used in (in the
// background: nobody waits for it).
func (g *objectGroup) release() {
	g.mu.Lock()
	name, sessions := g.name, g.sessions
	g.released, g.sessions = true, nil
	g.mu.Unlock()
	for _, s := range sessions {
		releaseGroup(context.Background(), s, name)
	}
}
