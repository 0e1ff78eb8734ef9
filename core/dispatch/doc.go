// Package dispatch holds the one action dispatcher of a browser session:
// producer grants and fencing, per-producer sequence spaces, budgets, the
// fair single worker that runs actions one at a time, and held-input safety.
//
// # Producers and generations
//
// The appliance grants each interactive viewer and each agent a producer:
// an unguessable producerId and producerGeneration (first 1), sent in
// signaling and never chosen by the client. The caller stamps them on every
// action.Envelope from the peer's grant. Renew (reconnect, peer replacement) keeps
// the id and bumps the generation; End (peer or DataChannel closed, socket
// lost, revoke) ends the producer. A message for an older generation, or
// for an ended producer, is rejected stale_generation forever; an id never
// granted (or forgotten long after it ended) is rejected unknown_producer.
// Every generation starts fresh: controlSeq and pointerSeq both restart at
// 1, and the actionId ledger is empty. The token bucket belongs to the
// producer id and is carried across generations.
//
// # Order of checks
//
// Submit checks, in this order: session closed (session_closed); producer
// id and generation (unknown_producer, stale_generation); from here the
// message renews the producer's held-input watchdog, even if it is refused
// later; field validation (Validate: unknown_kind, not_allowed,
// invalid_argument, too_large); actionId length ≤ 128 bytes
// (invalid_argument); then the channel's own rules below.
//
// # Control channel (every kind except pointer_move, wheel, heartbeat)
//
//   - actionId is required; it is the idempotency key within a producer
//     generation. The ledger keeps the last LedgerSize (256) actionIds.
//   - A known actionId is answered from the ledger whatever its controlSeq:
//     same payload → the same final ack again (completed or rejected), or the
//     accepted ack if the action is still queued or running; a different
//     payload → rejected conflict. Neither runs anything nor consumes a seq.
//   - Otherwise controlSeq must be exactly last+1 (the first is 1). Anything
//     else — a gap, or a replay of an unknown actionId — is rejected seq_gap
//     (the message says which seq is expected).
//   - A coordinate action (pointer_down, pointer_up) carrying a non-zero
//     pageRevision older than the page's is rejected stale_page.
//   - Then bounds: queue_full, then rate_limited (see Budgets). A key_down of
//     a new key while 64 keys are held is rejected not_allowed.
//   - Only acceptance consumes the seq. Every synchronous rejection leaves
//     controlSeq where it was, so the client re-sends that seq (with the same
//     or a new actionId); messages it pipelined behind a rejected one come
//     back seq_gap. This keeps the accepted stream gap-free: nothing is
//     accepted behind a message refused at submit.
//   - Accepted: the action gets the next session-wide actionRevision and an
//     "accepted" ack is sent before Submit returns; later exactly one of
//     "completed" (with Result) or "rejected" (stale_page re-checked at
//     execution, the executor's refusal code, outcome_unknown, or
//     stale_generation / session_closed if dropped before it started).
//     Post-acceptance outcomes are what the ledger returns for duplicates.
//
// # Heartbeat
//
// heartbeat is out of band: its controlSeq is ignored and never consumed,
// actionId is optional, it is not charged, never queued and never reaches the
// executor. It is acked accepted then completed before Submit returns. Its
// purpose is to renew held input (see Held input).
//
// # Pointer channel (pointer_move, wheel)
//
//   - pointerSeq must exceed the producer's high-water mark (first is 1); a
//     lower or equal one is dropped silently and counted (12 before 11 → 11
//     dropped). A valid message above the mark raises it, even if it is then
//     dropped or refused (stale page, queue_full, rate_limited). pointerSeq
//     and controlSeq never read or move each other.
//   - A non-zero pageRevision older than the page's drops the action
//     silently (counted) — at submit and again just before it runs.
//   - A pointer_move whose producer's queue ends with a not-yet-started
//     pointer_move replaces it (coalesced, not charged, counted). Only the
//     tail is coalesced: a move is never hoisted in front of a queued control
//     action, so a drag (down, moves, up) keeps its shape.
//   - pointer_move is never charged; wheel is charged one credit.
//   - Accepted pointer actions get an actionRevision but no acks. A pointer
//     action is acked only when rejected for a reason other than staleness
//     (invalid_argument, queue_full, rate_limited, stale_generation,
//     the executor's code, outcome_unknown, …), with the envelope's actionId
//     (which may be empty).
//
// # Budgets
//
// Per session at most 128 queued actions and 1 MiB of queued bytes
// (Action.Size + len(actionId)); per producer at most 32 queued; over any →
// queue_full. The running action is not counted as queued. An action larger
// than the byte budget is admitted only into an empty session queue, so a
// 1 MiB text_insert is possible. Per producer a token bucket (burst 16,
// refill 8/s): every accepted control action and wheel costs one credit;
// pointer_move, heartbeat and releases (key_up, pointer_up: refusing one
// would leave input held) cost nothing; refused messages cost nothing.
// Clients should accumulate wheel deltas to a few messages per second.
//
// # The worker
//
// One goroutine per session runs one action at a time. Each producer has its
// own FIFO; the worker takes one action from the next producer in
// round-robin order (grant order), so a flooding producer delays another by
// at most one action per other producer. Synthesized releases run before
// queued actions. actionRevision is assigned at acceptance (session-wide,
// increasing); execution order across producers follows the round-robin.
//
// Each action runs under a 30 s deadline. If the executor returns a
// *errcode.Error its code is passed through in a rejected ack; any other
// error, a panic, or the deadline means the action may have had an effect:
// rejected outcome_unknown. An action is never re-run. When the deadline
// passes the worker waits a short grace (at most 1 s) for the executor to
// return, then abandons it (counted) and moves on.
//
// # Held input
//
// Per producer generation the dispatcher tracks pressed keys (key_down minus
// key_up, keyed by code, else key) and pressed buttons (pointer_down minus
// pointer_up) and the last pointer position. A down counts as pressed once
// it completed or ended outcome_unknown; an up clears it only when it
// completed. When the generation ends (End, Renew, Close) or when it holds
// something and has sent nothing for 5 s (HeldWatchdog; any authenticated
// Submit including heartbeat renews it), the dispatcher synthesizes
// pointer_up for each held button at the last position, then key_up for each
// held key (reverse press order), and runs them through the executor on the
// worker, bypassing fencing and budgets. Clients holding a key or button
// send a heartbeat at least every 2 s. When a generation ends its queued
// actions are dropped: rejected stale_generation (End, Renew) or
// session_closed (Close). The action already running finishes; what it
// pressed is released right after.
//
// The dispatcher is the one owner of held input: the executor keeps none.
// Each pointer action it runs carries the buttons held on the page as it
// starts (action.Action.Buttons, the union over producers: the page has
// one mouse); a pointer_up of a button not among them lifts nothing, and
// a key_up of a key its generation does not hold completes without
// running. Leaving a page (a tab switch), the session takes LiftHeld's
// releases and runs them on the page left; what they lift is forgotten.
//
// # Acks
//
// Submit sends the synchronous ack (accepted or rejected) before it returns;
// the final ack of an accepted action never overtakes its accepted ack.
// reply runs outside the dispatcher's lock (caller's or worker's goroutine):
// it must not block and must not call Close, and may call Submit, End,
// Renew or Stats. Rejected acks carry a stable code and a message that never
// echoes typed text, clipboard or URLs.
//
// Close rejects queued actions session_closed, cancels the running action
// (outcome_unknown unless the executor says otherwise), releases all held
// input within a 5 s budget and stops the worker. Submit after Close is
// rejected session_closed.
package dispatch
