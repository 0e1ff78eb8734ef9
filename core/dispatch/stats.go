package dispatch

import "maps"

// counters are the dispatcher's running totals (under Dispatcher.mu).
type counters struct {
	accepted, executed, completed    uint64
	duplicates, heartbeats           uint64
	rejected                         map[string]uint64
	droppedPointer, droppedStalePage uint64
	coalesced                        uint64
	releaseEvents, released          uint64
	releaseFailed, releaseSkipped    uint64
	watchdogFired, abandoned         uint64
}

// Stats is a snapshot of a dispatcher. Counters are totals since New.
type Stats struct {
	Queued      int  // actions waiting, all producers
	QueuedBytes int  // their bytes (Action.Size + len(actionId))
	Running     bool // an action or release is executing now
	Producers   int  // live producers
	Held        int  // keys and buttons held, all live producers
	HeldKeys    int  // … of which keys

	Accepted   uint64 // actions accepted into the queue (control and pointer)
	Executed   uint64 // actions handed to the executor
	Completed  uint64 // actions that completed
	Duplicates uint64 // duplicate actionIds answered from the ledger
	Heartbeats uint64
	// Rejected counts rejections by code, at submit and after acceptance.
	Rejected map[string]uint64

	DroppedPointer   uint64 // pointer actions dropped: pointerSeq not above the high-water mark
	DroppedStalePage uint64 // pointer actions dropped: older pageRevision
	CoalescedMoves   uint64 // pointer moves that replaced a queued one

	ReleaseEvents  uint64 // times held input was released (end, renew, close, watchdog)
	Released       uint64 // synthesized key_up / pointer_up executed
	ReleaseFailed  uint64 // … of which returned an error
	ReleaseSkipped uint64 // … not run because Close's budget was spent
	WatchdogFired  uint64 // releases triggered by the watchdog
	AbandonedExecs uint64 // executions that ignored their deadline past the grace

	// ProducerQueue is the queue depth of each live producer, by producer
	// id. Producer ids identify grants: do not export them as metric labels
	// or log them whole.
	ProducerQueue map[string]int
}

// Stats returns a snapshot.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{
		Queued: d.queued, QueuedBytes: d.qbytes, Running: d.running, Producers: len(d.ring),
		Accepted: d.st.accepted, Executed: d.st.executed, Completed: d.st.completed,
		Duplicates: d.st.duplicates, Heartbeats: d.st.heartbeats,
		Rejected:       maps.Clone(d.st.rejected),
		DroppedPointer: d.st.droppedPointer, DroppedStalePage: d.st.droppedStalePage,
		CoalescedMoves: d.st.coalesced,
		ReleaseEvents:  d.st.releaseEvents, Released: d.st.released,
		ReleaseFailed: d.st.releaseFailed, ReleaseSkipped: d.st.releaseSkipped,
		WatchdogFired: d.st.watchdogFired, AbandonedExecs: d.st.abandoned,
		ProducerQueue: make(map[string]int, len(d.ring)),
	}
	for _, p := range d.ring {
		s.ProducerQueue[p.id] = len(p.queue)
		s.Held += p.gen.held.count()
		s.HeldKeys += len(p.gen.held.keys)
	}
	return s
}
