// Human input over the viewer peer's DataChannels (docs/protocol.md,
// "DataChannels"): captures pointer, wheel, keyboard, IME and paste on the
// video, normalizes coordinates to the displayed picture, fences every
// message with the producer grant from welcome, and shows acks, page state,
// dialogs and latency. app.js starts and ends it with each peer.
//
// The parts, each with its own state:
//   input-link.js     the grant, sequences, pending acks, the channels
//   input-pointer.js  pointer and wheel
//   input-keys.js     keyboard, IME, paste and copy-out
//   input-page.js     page state, dialogs, navigation controls
//   frame-probe.js    input → changed frame latency
//   wire.js           the message format and the constants shared with Go

import { statusOf } from "./dom.js";
import { FrameProbe } from "./frame-probe.js";
import { InputLink } from "./input-link.js";
import { Keys } from "./input-keys.js";
import { PageView } from "./input-page.js";
import { Pointer } from "./input-pointer.js";

export { decode, encode } from "./wire.js";

const HEARTBEAT_EVERY_MS = 1500; // while a key or button is held (server watchdog: 5 s)
const REJECT_SHOW_MS = 3000;
const POINTER_KINDS = new Set(["pointer_move", "wheel"]);

export function createInput({ ui, setStatus, maxMessageSize, onEnded }) {
  const tabcast = window.tabcast;
  const { video, sink } = ui;
  let heartbeatTimer = null;
  let rejectTimer = null;
  let statusBefore = null; // what the status line showed before a rejection

  const link = new InputLink({
    maxMessageSize,
    changed: () => render(),
    state: (msg) => {
      if (!page.onState(msg) && msg.type === "error") setStatus(`${msg.code || "error"}: ${msg.message || ""}`, true);
    },
    ack: (a) => { tabcast.lastAck = a; },
    ackLatency: (ms) => {
      tabcast.latency.ack = ms;
      ui.latencyAck.textContent = `${ms} ms`;
    },
    reject: (a) => showReject(a),
    released: () => {
      pointer.forget();
      keys.forget();
    },
    ended: (why) => onEnded?.(why),
    badMessage: (label) => setStatus(`bad message on ${label}`, true),
  });

  const probe = new FrameProbe(video, (ms) => {
    tabcast.latency.frame = ms;
    ui.latencyFrame.textContent = `${ms} ms`;
  });

  // send is a user's control input: also measures input → frame.
  function send(action) {
    probe.start(performance.now());
    return link.sendControl(action);
  }

  function focusSink() {
    sink.focus({ preventScroll: true });
  }

  const page = new PageView(ui, { send, focus: focusSink, active: () => link.active });
  const pointer = new Pointer(video, { link, send, focus: focusSink });
  const keys = new Keys(ui, { link, send, focus: focusSink, setStatus });

  tabcast.lastAck = null;
  tabcast.latency = { ack: null, frame: null };
  // For tests and operators: the input state, read when asked.
  Object.defineProperty(tabcast, "input", {
    configurable: true,
    enumerable: true,
    get: () => (link.active ? { ...link.info(), page: { ...page.page } } : null),
  });
  tabcast.pictureRect = () => pointer.pictureRect();
  // For tests and operators: send any action (fields as in core/action);
  // control actions resolve with their final ack.
  tabcast.send = (kind, fields = {}) => {
    const a = { ...fields, kind };
    if (POINTER_KINDS.has(kind)) return Promise.resolve(link.sendPointer(a));
    return send(a);
  };

  // ---- a peer's lifetime ----

  function reset() {
    clearInterval(heartbeatTimer);
    heartbeatTimer = null;
    pointer.reset();
    keys.reset();
    page.reset();
  }

  function start(welcome) {
    end();
    link.start(welcome);
    heartbeatTimer = setInterval(heartbeat, HEARTBEAT_EVERY_MS);
    render();
  }

  // end forgets the peer; pending actions resolve with a local rejection.
  function end() {
    if (!link.active) return;
    reset();
    link.end();
    render();
  }

  // heartbeat renews what is held (the appliance releases it after 5 s of
  // silence).
  function heartbeat() {
    if (link.active && (keys.holding || pointer.holding)) link.sendControl({ kind: "heartbeat" });
  }

  // ---- showing ----

  function focused() {
    return document.activeElement === sink || document.activeElement === video;
  }

  function render() {
    const on = link.ready;
    let text = "Input off";
    if (link.active && !link.interactive) {
      // view_only: this user may watch but not act; other reasons are named.
      const why = link.inputError;
      text = why && why !== "view_only" ? `View only (${why.replace(/_/g, " ")})` : "View only";
    }
    else if (link.active && link.ended) text = "Input ended";
    else if (link.active && !on) text = "Input connecting…";
    else if (on) text = focused() ? "Input on" : "Input on · click to type";
    ui.inputState.textContent = text;
    ui.inputState.dataset.state = on ? "enabled" : "disabled";
    ui.inputState.dataset.reason = link.active && !link.interactive ? (link.inputError || "not_interactive") : "";
    ui.inputState.dataset.focused = String(on && focused());
    page.render(on);
  }

  function showReject(a) {
    if (a.code === "stale_generation" && link.active && !link.ended) render();
    if (!rejectTimer) statusBefore = statusOf();
    clearTimeout(rejectTimer);
    setStatus(`input rejected: ${a.code}${a.message ? ` — ${a.message}` : ""}`, true);
    rejectTimer = setTimeout(() => {
      rejectTimer = null;
      if (statusBefore) setStatus(statusBefore.text, statusBefore.error);
      statusBefore = null;
    }, REJECT_SHOW_MS);
  }

  video.addEventListener("focus", () => focusSink());
  for (const el of [sink, video]) {
    el.addEventListener("focus", render);
    el.addEventListener("blur", () => {
      render();
      // Keys held when focus leaves would never see their keyup.
      if (!focused()) keys.releaseAll();
    });
  }

  render();
  return { start, end, channel: (dc) => link.channel(dc), render };
}
