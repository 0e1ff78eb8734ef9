// Pointer input on the video: presses and releases on control, moves
// (coalesced to one per animation frame) and wheel (summed, at most every
// WHEEL_EVERY_MS) on the pointer channel, in coordinates normalized to the
// displayed picture. The appliance counts multi-clicks and owns what is
// held (core/dispatch); the panel remembers only which buttons it pressed,
// to release them, to keep a drag going past the picture's edge and to
// send heartbeats while one is down.

import { MAX_WHEEL_DELTA } from "./wire.js";

const WHEEL_EVERY_MS = 200; // wheel deltas are summed: ≤ 5 wheel messages/s
const BUTTONS = ["left", "middle", "right"];

export class Pointer {
  // link: the InputLink; send(action): a user's control input (measures
  // input → frame); focus(): moves keyboard focus to the sink.
  constructor(video, { link, send, focus }) {
    this.video = video;
    this.link = link;
    this.send = send;
    this.focus = focus;
    this.pressed = new Set(); // buttons this panel sent down and not yet up
    this.move = null; // the latest position not yet sent
    this.moveFrame = 0;
    this.wheel = { dx: 0, dy: 0, p: null, timer: null };
    this.listen();
  }

  get holding() { return this.pressed.size > 0; }

  // reset forgets everything: a new peer, or none.
  reset() {
    clearTimeout(this.wheel.timer);
    if (this.moveFrame) cancelAnimationFrame(this.moveFrame);
    this.pressed.clear();
    this.move = null;
    this.moveFrame = 0;
    this.wheel = { dx: 0, dy: 0, p: null, timer: null };
  }

  // forget drops what is held without releasing it: the producer ended
  // and the appliance released it on its side.
  forget() { this.pressed.clear(); }

  // pictureRect is the displayed picture inside the video element
  // (object-fit: contain leaves letterbox bars on two sides).
  pictureRect() {
    const video = this.video;
    const vw = video.videoWidth;
    const vh = video.videoHeight;
    const r = video.getBoundingClientRect();
    if (!vw || !vh || !r.width || !r.height) return null;
    const scale = Math.min(r.width / vw, r.height / vh);
    const w = vw * scale;
    const h = vh * scale;
    return { left: r.left + (r.width - w) / 2, top: r.top + (r.height - h) / 2, width: w, height: h };
  }

  // normalize maps an event to [0,1]² of the picture; null in the
  // letterbox unless clamp (a drag that left the picture still ends).
  normalize(ev, clamp = false) {
    const p = this.pictureRect();
    if (!p) return null;
    let x = (ev.clientX - p.left) / p.width;
    let y = (ev.clientY - p.top) / p.height;
    if (x < 0 || x > 1 || y < 0 || y > 1) {
      if (!clamp) return null;
      x = Math.min(1, Math.max(0, x));
      y = Math.min(1, Math.max(0, y));
    }
    return { x, y };
  }

  listen() {
    const video = this.video;
    video.addEventListener("pointerdown", (ev) => this.down(ev));
    video.addEventListener("pointerup", (ev) => this.up(ev));
    video.addEventListener("pointercancel", (ev) => this.cancel(ev));
    video.addEventListener("pointermove", (ev) => this.moved(ev));
    video.addEventListener("contextmenu", (ev) => ev.preventDefault());
    video.addEventListener("wheel", (ev) => this.wheeled(ev), { passive: false });
  }

  down(ev) {
    this.focus();
    ev.preventDefault();
    if (!this.link.ready) return;
    const p = this.normalize(ev);
    const button = BUTTONS[ev.button];
    if (!p || !button) return;
    try { this.video.setPointerCapture(ev.pointerId); } catch { /* not capturable */ }
    this.pressed.add(button);
    this.flushMove();
    this.send({ kind: "pointer_down", x: p.x, y: p.y, button });
  }

  up(ev) {
    if (!this.link.active) return;
    const button = BUTTONS[ev.button];
    if (!button || !this.pressed.has(button)) return;
    this.pressed.delete(button);
    const p = this.normalize(ev, true) || { x: 0, y: 0 };
    this.flushMove();
    this.link.sendControl({ kind: "pointer_up", x: p.x, y: p.y, button });
  }

  // cancel releases whatever is held at the last known place.
  cancel(ev) {
    if (!this.link.active) return;
    for (const button of this.pressed) {
      const p = this.normalize(ev, true) || { x: 0, y: 0 };
      this.link.sendControl({ kind: "pointer_up", x: p.x, y: p.y, button });
    }
    this.pressed.clear();
  }

  moved(ev) {
    if (!this.link.ready) return;
    const p = this.normalize(ev, this.pressed.size > 0);
    if (!p) return;
    // Coalesced: one move per animation frame, the latest position.
    this.move = p;
    if (!this.moveFrame) this.moveFrame = requestAnimationFrame(() => this.flushMove());
  }

  flushMove() {
    if (!this.link.active) return;
    if (this.moveFrame) cancelAnimationFrame(this.moveFrame);
    this.moveFrame = 0;
    const p = this.move;
    this.move = null;
    if (p) this.link.sendPointer({ kind: "pointer_move", x: p.x, y: p.y });
  }

  wheeled(ev) {
    if (!this.link.ready) return;
    const p = this.normalize(ev);
    if (!p) return;
    ev.preventDefault();
    const unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? (this.pictureRect()?.height || 800) : 1;
    const w = this.wheel;
    w.dx += ev.deltaX * unit;
    w.dy += ev.deltaY * unit;
    w.p = p;
    if (!w.timer) this.flushWheel();
  }

  // flushWheel sends the summed deltas now and at most every WHEEL_EVERY_MS
  // after (each wheel message costs a rate credit).
  flushWheel() {
    if (!this.link.active) return;
    const w = this.wheel;
    w.timer = null;
    if (!w.p || (w.dx === 0 && w.dy === 0)) return;
    const clamp = (d) => Math.max(-MAX_WHEEL_DELTA, Math.min(MAX_WHEEL_DELTA, d));
    this.link.sendPointer({ kind: "wheel", x: w.p.x, y: w.p.y, deltaX: clamp(w.dx), deltaY: clamp(w.dy) });
    w.dx = 0;
    w.dy = 0;
    w.timer = setTimeout(() => this.flushWheel(), WHEEL_EVERY_MS);
  }
}
