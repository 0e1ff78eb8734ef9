// InputLink is one producer grant over the viewer peer's DataChannels
// (docs/protocol.md, "DataChannels"): the grant from welcome, the two
// sequence spaces, the control actions waiting for their final ack and the
// channels themselves. It knows nothing of the DOM; input.js wires it to
// the page through hooks.

import { POINTER_HIGH_WATER, POINTER_LOW_WATER, decode, encode, localReject } from "./wire.js";

const MAX_PENDING = 256; // control actions waiting for their final ack

export class InputLink {
  // hooks (all optional):
  //   changed()            something render shows changed
  //   state(msg)           a state-channel message other than "producer"
  //   ack(a)               every control ack, first
  //   ackLatency(ms)       the first ack of an action arrived after ms
  //   reject(a)            an action was refused (server or local)
  //   released()           the producer ended: the appliance lifts what it held
  //   ended(why)           a closed channel ended the producer (after released)
  //   badMessage(label)    a message on label did not decode
  //   maxMessageSize()     the connection's send limit, 0 if unknown
  constructor(hooks) {
    this.hooks = hooks;
    this.s = null; // this peer's grant and channels; null between peers
  }

  // start takes a welcome: new peer, new grant, sequences start over.
  start(welcome) {
    this.end();
    this.s = {
      interactive: !!welcome.interactive,
      inputError: welcome.inputError || "",
      grant: {
        browserSessionId: welcome.sessionId,
        peerId: welcome.peerId,
        connectionGeneration: welcome.connectionGeneration,
        producerId: welcome.producerId,
        producerGeneration: welcome.producerGeneration,
      },
      pageRevision: welcome.pageRevision || 0,
      controlSeq: 0,
      pointerSeq: 0,
      sent: 0, // control messages sent this generation: actionIds stay unique even when a seq is re-sent
      dc: { control: null, pointer: null, state: null },
      pointerPaused: false,
      pointerDropped: 0,
      pending: new Map(), // actionId → {seq, kind, t, acked, accepted, resolve}
      ended: "",
    };
  }

  // end forgets the peer; pending promises resolve with a local rejection.
  end() {
    const old = this.s;
    if (!old) return;
    for (const p of old.pending.values()) p.resolve(localReject("disconnected", "the connection ended"));
    this.s = null;
    for (const dc of Object.values(old.dc)) {
      if (dc) dc.onmessage = dc.onclose = dc.onopen = dc.onbufferedamountlow = null;
    }
  }

  get active() { return !!this.s; }
  get interactive() { return !!this.s?.interactive; }
  get inputError() { return this.s?.inputError ?? ""; }
  get ended() { return this.s?.ended ?? ""; }

  // ready: input may be sent now.
  get ready() {
    const s = this.s;
    return !!s && s.interactive && !s.ended && s.dc.control?.readyState === "open" &&
      s.dc.pointer?.readyState === "open";
  }

  // info is what window.tabcast.input shows of the link.
  info() {
    const s = this.s;
    return {
      enabled: this.ready,
      interactive: s.interactive,
      inputError: s.inputError,
      ended: s.ended,
      producerId: s.grant.producerId,
      producerGeneration: s.grant.producerGeneration,
      connectionGeneration: s.grant.connectionGeneration,
      pageRevision: s.pageRevision,
      controlSeq: s.controlSeq,
      pointerSeq: s.pointerSeq,
      pointerDropped: s.pointerDropped,
      pending: s.pending.size,
    };
  }

  // channel takes one of the peer's DataChannels (pc.ondatachannel).
  channel(dc) {
    const mine = this.s;
    if (!mine || !(dc.label in mine.dc)) return;
    dc.binaryType = "arraybuffer";
    mine.dc[dc.label] = dc;
    if (dc.label === "pointer") {
      dc.bufferedAmountLowThreshold = POINTER_LOW_WATER;
      dc.onbufferedamountlow = () => { mine.pointerPaused = false; };
    }
    dc.onopen = () => this.hooks.changed?.();
    dc.onclose = () => {
      if (this.s !== mine) return;
      // A closed control or pointer channel ends the producer.
      if (dc.label !== "state" && !mine.ended) this.endProducer(`${dc.label} channel closed`);
      this.hooks.changed?.();
    };
    dc.onmessage = (ev) => {
      if (this.s !== mine) return;
      const msg = decode(ev.data);
      if (!msg) {
        this.hooks.badMessage?.(dc.label);
        return;
      }
      if (dc.label === "control" && msg.type === "ack") this.onAck(msg);
      else if (dc.label === "state") this.onState(msg);
    };
    if (dc.readyState === "open") this.hooks.changed?.();
  }

  endProducer(why) {
    this.s.ended = why;
    this.hooks.released?.();
    this.hooks.ended?.(why);
  }

  // ---- sending ----

  ident() {
    return { ...this.s.grant, pageRevision: this.s.pageRevision };
  }

  // sendControl sends one control action; the promise resolves with its
  // final ack (completed or rejected), or a local rejection.
  sendControl(action) {
    if (!this.ready) return Promise.resolve(localReject("not_ready", "input is not available"));
    const s = this.s;
    const heartbeat = action.kind === "heartbeat";
    const env = this.ident();
    let seq = 0;
    let actionId = "";
    if (!heartbeat) {
      seq = ++s.controlSeq;
      actionId = `${s.grant.producerGeneration}-${++s.sent}`;
      env.controlSeq = seq;
      env.actionId = actionId;
    }
    env.action = action;
    const bytes = encode(env);
    const limit = this.hooks.maxMessageSize?.() || 0;
    if (limit && bytes.length > limit) {
      if (seq) s.controlSeq--;
      const a = localReject("too_large", `over the ${limit}-byte message limit of this connection`);
      this.hooks.reject?.(a);
      return Promise.resolve(a);
    }
    try {
      s.dc.control.send(bytes);
    } catch {
      if (seq) s.controlSeq--;
      return Promise.resolve(localReject("not_ready", "the control channel refused the message"));
    }
    if (heartbeat) return Promise.resolve(null);
    if (s.pending.size >= MAX_PENDING) {
      const [oldest, p] = s.pending.entries().next().value;
      s.pending.delete(oldest);
      p.resolve(localReject("lost", "too many actions waiting for an answer"));
    }
    return new Promise((resolve) => {
      s.pending.set(actionId, { seq, kind: action.kind, t: performance.now(), acked: false, accepted: false, resolve });
    });
  }

  // sendPointer sends a move or wheel unless the pointer channel is over
  // its high-water mark (then moves are dropped until it drains).
  sendPointer(action) {
    if (!this.ready) return false;
    const s = this.s;
    const dc = s.dc.pointer;
    if (s.pointerPaused || dc.bufferedAmount > POINTER_HIGH_WATER) {
      s.pointerPaused = dc.bufferedAmount > POINTER_LOW_WATER;
      if (s.pointerPaused) {
        s.pointerDropped++;
        return false;
      }
    }
    const env = this.ident();
    env.pointerSeq = ++s.pointerSeq;
    env.action = action;
    try {
      dc.send(encode(env));
    } catch {
      s.pointerDropped++;
      return false;
    }
    return true;
  }

  // ---- answers ----

  onAck(a) {
    const s = this.s;
    this.hooks.ack?.(a);
    const p = a.actionId ? s.pending.get(a.actionId) : null;
    if (!p) {
      // Pointer rejections, heartbeats, refused envelopes without an actionId.
      if (a.status === "rejected") this.hooks.reject?.(a);
      return;
    }
    if (!p.acked) {
      p.acked = true;
      this.hooks.ackLatency?.(Math.round(performance.now() - p.t));
    }
    if (a.status === "accepted") {
      p.accepted = true;
      return;
    }
    s.pending.delete(a.actionId);
    if (a.status === "rejected") {
      // A refusal before acceptance does not consume the seq: the next
      // message re-uses it (those sent behind it come back seq_gap).
      if (!p.accepted && p.seq) s.controlSeq = Math.min(s.controlSeq, p.seq - 1);
      this.hooks.reject?.(a);
    }
    this.hooks.changed?.();
    p.resolve(a);
  }

  onState(msg) {
    const s = this.s;
    if (msg.type === "page_state") {
      const rev = Number(msg.pageRevision);
      if (Number.isFinite(rev) && rev > 0) s.pageRevision = rev;
    }
    if (msg.type === "producer") this.onProducer(msg);
    else this.hooks.state?.(msg);
    this.hooks.changed?.();
  }

  // onProducer follows the grant: a new one restarts the sequence spaces,
  // a revoked one ends input until it is enabled again.
  onProducer(msg) {
    const s = this.s;
    const gen = Number(msg.producerGeneration);
    if (msg.producerId && (msg.producerId !== s.grant.producerId || gen !== s.grant.producerGeneration) && gen > 0) {
      s.grant.producerId = String(msg.producerId);
      s.grant.producerGeneration = gen;
      s.controlSeq = 0;
      s.pointerSeq = 0;
      s.sent = 0;
      for (const p of s.pending.values()) p.resolve(localReject("stale_generation", "the producer grant changed"));
      s.pending.clear();
    }
    if (msg.enabled === false) {
      s.ended = msg.reason ? `producer ${msg.reason}` : "producer revoked";
      this.hooks.released?.();
    } else if (msg.enabled === true && s.ended.startsWith("producer")) {
      s.ended = "";
    }
  }
}
