// Human input over the viewer peer's DataChannels (docs/protocol.md,
// "DataChannels"): captures pointer, wheel, keyboard, IME and paste on the
// video, normalizes coordinates to the displayed picture, fences every
// message with the producer grant from welcome, and shows acks, page state,
// dialogs and latency. One InputSession per peer; app.js starts and ends it.

const VERSION = 1;
const POINTER_HIGH_WATER = 64 * 1024; // drop moves above this buffered…
const POINTER_LOW_WATER = 16 * 1024; // …until the channel drains to this
const HEARTBEAT_EVERY_MS = 1500; // while a key or button is held (server: ≤ 2 s)
const WHEEL_EVERY_MS = 200; // wheel deltas are summed: ≤ 5 wheel messages/s
const REPEAT_EVERY_MS = 150; // key auto-repeat is thinned to this
const CLICK_MS = 500; // multi-click window
const CLICK_SLOP_PX = 4;
const FRAME_WAIT_MS = 2000; // give up looking for a changed frame
const REJECT_SHOW_MS = 3000;
const MAX_PENDING = 256; // control actions waiting for their final ack
const MAX_WHEEL_DELTA = 100000;
const BUTTONS = ["left", "middle", "right"];
const POINTER_KINDS = new Set(["pointer_move", "wheel"]);

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// encode frames one message: the version byte, then UTF-8 JSON.
export function encode(obj) {
  const body = encoder.encode(JSON.stringify(obj));
  const out = new Uint8Array(body.length + 1);
  out[0] = VERSION;
  out.set(body, 1);
  return out;
}

// decode reads one server message, or returns null.
export function decode(data) {
  if (!(data instanceof ArrayBuffer)) return null;
  const u8 = new Uint8Array(data);
  if (u8.length < 2 || u8[0] !== VERSION) return null;
  try {
    const msg = JSON.parse(decoder.decode(u8.subarray(1)));
    return msg && typeof msg === "object" ? msg : null;
  } catch {
    return null;
  }
}

// CDP modifier bits (core/action).
function modifiersOf(ev) {
  return (ev.altKey ? 1 : 0) | (ev.ctrlKey ? 2 : 0) | (ev.metaKey ? 4 : 0) | (ev.shiftKey ? 8 : 0);
}

function localReject(code, message) {
  return { type: "ack", actionId: "", status: "rejected", code, message, local: true };
}

export function createInput({ ui, setStatus, maxMessageSize, onEnded }) {
  const tabcast = window.tabcast;
  const video = ui.video;
  const sink = ui.sink;
  let s = null; // the current InputSession
  let rejectTimer = null;
  let statusBefore = null;

  tabcast.lastAck = null;
  tabcast.latency = { ack: null, frame: null };
  tabcast.input = null;

  // ---- session lifecycle ----

  function start(welcome) {
    end();
    s = {
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
      page: { url: "", title: "", canGoBack: false, canGoForward: false, loading: false },
      controlSeq: 0,
      pointerSeq: 0,
      sent: 0, // control messages sent this generation: actionIds stay unique even when a seq is re-sent
      dc: { control: null, pointer: null, state: null },
      pointerPaused: false,
      pointerDropped: 0,
      pending: new Map(), // actionId → {seq, kind, t, acked, accepted, resolve}
      ended: "",
      heldKeys: new Map(), // code (or key) → {key, code}
      heldButtons: new Map(), // button → clickCount
      lastClick: null,
      lastRepeat: 0,
      move: null,
      moveFrame: 0,
      wheel: { dx: 0, dy: 0, p: null, timer: null },
      heartbeat: setInterval(heartbeat, HEARTBEAT_EVERY_MS),
      dialog: null,
    };
    publish();
    render();
  }

  // end forgets the session (the peer is gone); pending promises resolve
  // with a local rejection.
  function end() {
    if (!s) return;
    clearInterval(s.heartbeat);
    clearTimeout(s.wheel.timer);
    if (s.moveFrame) cancelAnimationFrame(s.moveFrame);
    for (const p of s.pending.values()) p.resolve(localReject("disconnected", "the connection ended"));
    const old = s;
    s = null;
    for (const dc of Object.values(old.dc)) {
      if (dc) dc.onmessage = dc.onclose = dc.onopen = dc.onbufferedamountlow = null;
    }
    hideDialog();
    publish();
    render();
  }

  // channel takes one of the peer's DataChannels (pc.ondatachannel).
  function channel(dc) {
    if (!s || !(dc.label in s.dc)) return;
    const mine = s;
    dc.binaryType = "arraybuffer";
    mine.dc[dc.label] = dc;
    if (dc.label === "pointer") {
      dc.bufferedAmountLowThreshold = POINTER_LOW_WATER;
      dc.onbufferedamountlow = () => { mine.pointerPaused = false; };
    }
    dc.onopen = () => render();
    dc.onclose = () => {
      if (s !== mine) return;
      if (dc.label !== "state" && !mine.ended) {
        // A closed control or pointer channel ends the producer.
        mine.ended = `${dc.label} channel closed`;
        releaseLocal();
        onEnded?.(mine.ended);
      }
      render();
    };
    dc.onmessage = (ev) => {
      if (s !== mine) return;
      const msg = decode(ev.data);
      if (!msg) {
        setStatus(`bad message on ${dc.label}`, true);
        return;
      }
      if (dc.label === "control" && msg.type === "ack") onAck(msg);
      else if (dc.label === "state") onState(msg);
    };
    if (dc.readyState === "open") render();
  }

  function ready() {
    return !!s && s.interactive && !s.ended && s.dc.control?.readyState === "open" &&
      s.dc.pointer?.readyState === "open";
  }

  function publish() {
    tabcast.input = s ? {
      enabled: ready(),
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
      page: { ...s.page },
    } : null;
  }

  function render() {
    const on = ready();
    let text = "Input off";
    if (s && !s.interactive) {
      // view_only: this user may watch but not act; other reasons are named.
      text = s.inputError && s.inputError !== "view_only" ? `View only (${s.inputError.replace(/_/g, " ")})` : "View only";
    }
    else if (s && s.ended) text = "Input ended";
    else if (s && !on) text = "Input connecting…";
    else if (on) text = document.activeElement === sink || document.activeElement === video ? "Input on" : "Input on · click to type";
    ui.inputState.textContent = text;
    ui.inputState.dataset.state = on ? "enabled" : "disabled";
    ui.inputState.dataset.reason = s && !s.interactive ? (s.inputError || "not_interactive") : "";
    ui.inputState.dataset.focused = String(on && (document.activeElement === sink || document.activeElement === video));
    ui.back.disabled = !on || !s.page.canGoBack;
    ui.forward.disabled = !on || !s.page.canGoForward;
    ui.reload.disabled = !on;
    ui.reload.dataset.loading = String(!!s?.page.loading);
    ui.address.disabled = !on;
    publish();
  }

  // ---- sending ----

  function ident() {
    return { ...s.grant, pageRevision: s.pageRevision };
  }

  // sendControl sends one control action; the promise resolves with its
  // final ack (completed or rejected), or a local rejection.
  function sendControl(action) {
    if (!ready()) return Promise.resolve(localReject("not_ready", "input is not available"));
    const heartbeat = action.kind === "heartbeat";
    const env = ident();
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
    const limit = maxMessageSize();
    if (limit && bytes.length > limit) {
      if (seq) s.controlSeq--;
      const a = localReject("too_large", `over the ${limit}-byte message limit of this connection`);
      showReject(a);
      return Promise.resolve(a);
    }
    try {
      s.dc.control.send(bytes);
    } catch {
      if (seq) s.controlSeq--;
      return Promise.resolve(localReject("not_ready", "the control channel refused the message"));
    }
    publish();
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
  function sendPointer(action) {
    if (!ready()) return false;
    const dc = s.dc.pointer;
    if (s.pointerPaused || dc.bufferedAmount > POINTER_HIGH_WATER) {
      s.pointerPaused = dc.bufferedAmount > POINTER_LOW_WATER;
      if (s.pointerPaused) {
        s.pointerDropped++;
        return false;
      }
    }
    const env = ident();
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

  // sendInput is a user's control input: also measures input → frame.
  function sendInput(action) {
    probeFrame(performance.now());
    return sendControl(action);
  }

  function heartbeat() {
    if (s && (s.heldKeys.size || s.heldButtons.size)) sendControl({ kind: "heartbeat" });
  }

  // ---- answers ----

  function onAck(a) {
    tabcast.lastAck = a;
    const p = a.actionId ? s.pending.get(a.actionId) : null;
    if (!p) {
      // Pointer rejections, heartbeats, refused envelopes without an actionId.
      if (a.status === "rejected") showReject(a);
      return;
    }
    if (!p.acked) {
      p.acked = true;
      const ms = Math.round(performance.now() - p.t);
      tabcast.latency.ack = ms;
      ui.latencyAck.textContent = `${ms} ms`;
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
      showReject(a);
    }
    publish();
    p.resolve(a);
  }

  function showReject(a) {
    if (a.code === "stale_generation" && s && !s.ended) render();
    if (!rejectTimer) statusBefore = { text: ui.status.textContent, error: ui.status.classList.contains("error") };
    clearTimeout(rejectTimer);
    setStatus(`input rejected: ${a.code}${a.message ? ` — ${a.message}` : ""}`, true);
    rejectTimer = setTimeout(() => {
      rejectTimer = null;
      if (statusBefore) setStatus(statusBefore.text, statusBefore.error);
      statusBefore = null;
    }, REJECT_SHOW_MS);
  }

  function onState(msg) {
    switch (msg.type) {
      case "page_state": {
        const rev = Number(msg.pageRevision);
        if (Number.isFinite(rev) && rev > 0) s.pageRevision = rev;
        s.page = {
          url: String(msg.url ?? ""),
          title: String(msg.title ?? ""),
          canGoBack: !!msg.canGoBack,
          canGoForward: !!msg.canGoForward,
          loading: !!msg.loading,
        };
        if (document.activeElement !== ui.address) ui.address.value = s.page.url;
        if (s.page.title) ui.title.textContent = s.page.title;
        ui.url.textContent = s.page.url;
        break;
      }
      case "dialog_opened":
        showDialog(msg);
        break;
      case "dialog_closed":
        hideDialog();
        break;
      case "producer": {
        const gen = Number(msg.producerGeneration);
        if (msg.producerId && (msg.producerId !== s.grant.producerId || gen !== s.grant.producerGeneration) && gen > 0) {
          // A new grant: its sequence spaces start over.
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
          releaseLocal();
        } else if (msg.enabled === true && s.ended.startsWith("producer")) {
          s.ended = "";
        }
        break;
      }
      case "error":
        setStatus(`${msg.code || "error"}: ${msg.message || ""}`, true);
        break;
      default:
        break;
    }
    render();
  }

  // ---- dialogs ----

  function showDialog(msg) {
    const kind = String(msg.dialogType || "alert");
    s.dialog = { kind };
    ui.dialogKind.textContent = kind === "beforeunload" ? "Leave page?" : kind;
    ui.dialogMessage.textContent = String(msg.message ?? "");
    const prompt = kind === "prompt";
    ui.dialogPrompt.hidden = !prompt;
    ui.dialogPrompt.value = prompt ? String(msg.defaultPrompt ?? "") : "";
    ui.dialogDismiss.hidden = kind === "alert";
    ui.dialog.hidden = false;
    (prompt ? ui.dialogPrompt : ui.dialogAccept).focus({ preventScroll: true });
  }

  function hideDialog() {
    ui.dialog.hidden = true;
    if (s) s.dialog = null;
  }

  function answerDialog(accept) {
    if (!s || !s.dialog) return;
    const a = { kind: "dialog_response", accept };
    if (accept && s.dialog.kind === "prompt") a.promptText = ui.dialogPrompt.value;
    hideDialog();
    sendInput(a);
    focusSink();
  }

  ui.dialogAccept.addEventListener("click", () => answerDialog(true));
  ui.dialogDismiss.addEventListener("click", () => answerDialog(false));
  ui.dialogPrompt.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") answerDialog(true);
    if (ev.key === "Escape") answerDialog(false);
  });

  // ---- navigation ----

  ui.back.addEventListener("click", () => sendInput({ kind: "back" }));
  ui.forward.addEventListener("click", () => sendInput({ kind: "forward" }));
  ui.reload.addEventListener("click", () => sendInput({ kind: "reload" }));
  ui.addressForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    let url = ui.address.value.trim();
    if (!url) return;
    // "example.com" means https://example.com; the appliance checks policy.
    if (!/^[a-z][a-z0-9+.-]*:/i.test(url)) url = `https://${url}`;
    sendInput({ kind: "navigate", url });
    focusSink();
  });
  ui.address.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && s) {
      ui.address.value = s.page.url;
      focusSink();
    }
  });

  // ---- coordinates ----

  // pictureRect is the displayed picture inside the video element
  // (object-fit: contain leaves letterbox bars on two sides).
  function pictureRect() {
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
  function normalize(ev, clamp = false) {
    const p = pictureRect();
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
  tabcast.pictureRect = pictureRect;

  // ---- pointer ----

  function focusSink() {
    sink.focus({ preventScroll: true });
  }

  video.addEventListener("focus", () => focusSink());
  for (const el of [sink, video]) {
    el.addEventListener("focus", render);
    el.addEventListener("blur", () => {
      render();
      // Keys held when focus leaves would never see their keyup.
      if (document.activeElement !== sink && document.activeElement !== video) releaseKeys();
    });
  }

  video.addEventListener("pointerdown", (ev) => {
    focusSink();
    ev.preventDefault();
    if (!ready()) return;
    const p = normalize(ev);
    const button = BUTTONS[ev.button];
    if (!p || !button) return;
    try { video.setPointerCapture(ev.pointerId); } catch { /* not capturable */ }
    const now = performance.now();
    const last = s.lastClick;
    let count = 1;
    if (last && last.button === button && now - last.t < CLICK_MS &&
        Math.hypot(ev.clientX - last.cx, ev.clientY - last.cy) <= CLICK_SLOP_PX) {
      count = Math.min(3, last.count + 1);
    }
    s.lastClick = { button, t: now, cx: ev.clientX, cy: ev.clientY, count };
    s.heldButtons.set(button, count);
    flushMove();
    sendInput({ kind: "pointer_down", x: p.x, y: p.y, button, clickCount: count });
  });

  function pointerUp(ev) {
    if (!s) return;
    const button = BUTTONS[ev.button];
    if (!button || !s.heldButtons.has(button)) return;
    const count = s.heldButtons.get(button);
    s.heldButtons.delete(button);
    const p = normalize(ev, true) || { x: 0, y: 0 };
    flushMove();
    sendControl({ kind: "pointer_up", x: p.x, y: p.y, button, clickCount: count });
  }
  video.addEventListener("pointerup", pointerUp);
  video.addEventListener("pointercancel", (ev) => {
    if (!s) return;
    // Release whatever is held at the last known place.
    for (const [button, count] of s.heldButtons) {
      const p = normalize(ev, true) || { x: 0, y: 0 };
      sendControl({ kind: "pointer_up", x: p.x, y: p.y, button, clickCount: count });
    }
    s.heldButtons.clear();
  });

  video.addEventListener("pointermove", (ev) => {
    if (!ready()) return;
    const p = normalize(ev, s.heldButtons.size > 0);
    if (!p) return;
    // Coalesced: one move per animation frame, the latest position.
    s.move = p;
    if (!s.moveFrame) s.moveFrame = requestAnimationFrame(flushMove);
  });

  function flushMove() {
    if (!s) return;
    if (s.moveFrame) cancelAnimationFrame(s.moveFrame);
    s.moveFrame = 0;
    const p = s.move;
    s.move = null;
    if (p) sendPointer({ kind: "pointer_move", x: p.x, y: p.y });
  }

  video.addEventListener("contextmenu", (ev) => ev.preventDefault());

  video.addEventListener("wheel", (ev) => {
    if (!ready()) return;
    const p = normalize(ev);
    if (!p) return;
    ev.preventDefault();
    const unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? (pictureRect()?.height || 800) : 1;
    const w = s.wheel;
    w.dx += ev.deltaX * unit;
    w.dy += ev.deltaY * unit;
    w.p = p;
    if (!w.timer) flushWheel();
  }, { passive: false });

  // flushWheel sends the summed deltas now and at most every WHEEL_EVERY_MS
  // after (each wheel message costs a rate credit).
  function flushWheel() {
    if (!s) return;
    const w = s.wheel;
    w.timer = null;
    if (!w.p || (w.dx === 0 && w.dy === 0)) return;
    const clamp = (d) => Math.max(-MAX_WHEEL_DELTA, Math.min(MAX_WHEEL_DELTA, d));
    sendPointer({ kind: "wheel", x: w.p.x, y: w.p.y, deltaX: clamp(w.dx), deltaY: clamp(w.dy) });
    w.dx = 0;
    w.dy = 0;
    w.timer = setTimeout(flushWheel, WHEEL_EVERY_MS);
  }

  // ---- keyboard ----

  function isShortcut(ev, letter) {
    return (ev.ctrlKey || ev.metaKey) && !ev.altKey && (ev.code === `Key${letter.toUpperCase()}` || ev.key.toLowerCase() === letter);
  }

  function onKeyDown(ev) {
    if (!s) return;
    // IME: the keys go to the composition; compositionend sends the text.
    if (ev.isComposing || ev.keyCode === 229) return;
    // A key the browser cannot name (virtual keyboards, some layouts,
    // synthetic input) or a dead key: let its text reach the sink, whose
    // input event sends it as text_insert.
    if (ev.key === "Unidentified" || ev.key === "Dead") {
      s.keySent = false;
      return;
    }
    s.keySent = true;
    // Ctrl/Cmd+V: let the browser fire the paste event (handled below).
    if (isShortcut(ev, "v")) return;
    ev.preventDefault();
    if (!ready()) return;
    const now = performance.now();
    if (ev.repeat) {
      if (now - s.lastRepeat < REPEAT_EVERY_MS) return;
      s.lastRepeat = now;
    }
    const id = ev.code || ev.key;
    s.heldKeys.set(id, { key: ev.key, code: ev.code });
    const a = { kind: "key_down", key: ev.key, code: ev.code, modifiers: modifiersOf(ev) };
    if (ev.repeat) a.repeat = true;
    const done = sendInput(a);
    if (!ev.repeat && (isShortcut(ev, "c") || isShortcut(ev, "x"))) copyOut(done);
  }

  function onKeyUp(ev) {
    if (!s) return;
    const id = ev.code || ev.key;
    if (!s.heldKeys.has(id)) return; // never sent down (paste V, keys from before the focus)
    ev.preventDefault();
    s.heldKeys.delete(id);
    sendControl({ kind: "key_up", key: ev.key, code: ev.code, modifiers: modifiersOf(ev) });
  }

  function releaseKeys() {
    if (!s) return;
    for (const k of s.heldKeys.values()) sendControl({ kind: "key_up", key: k.key, code: k.code, modifiers: 0 });
    s.heldKeys.clear();
  }

  // releaseLocal forgets held input once the producer ended (the appliance
  // releases it on its side).
  function releaseLocal() {
    s.heldKeys.clear();
    s.heldButtons.clear();
  }

  // Copy-out: the page's copied text comes back in the key's completed ack
  // (or, failing that, from clipboard_read) and goes to this browser's
  // clipboard when allowed, else into a box to copy by hand.
  async function copyOut(keyDone) {
    const a = await keyDone;
    if (!a || a.status !== "completed") return;
    let text = a.result?.text;
    if (typeof text !== "string" || text === "") {
      const r = await sendControl({ kind: "clipboard_read" });
      if (!r || r.status !== "completed") return;
      text = r.result?.text;
    }
    if (typeof text !== "string" || text === "") return;
    try {
      await navigator.clipboard.writeText(text);
      setStatus("Copied from the page");
    } catch {
      ui.clipboardText.value = text;
      ui.clipboardOut.hidden = false;
      ui.clipboardText.select();
    }
  }
  ui.clipboardClose.addEventListener("click", () => {
    ui.clipboardOut.hidden = true;
    ui.clipboardText.value = "";
    focusSink();
  });

  function onPaste(ev) {
    if (!s) return;
    ev.preventDefault();
    const text = ev.clipboardData?.getData("text/plain") ?? "";
    if (!ready() || text === "") return;
    // The page's clipboard gets the text, then Ctrl+V pastes it there.
    sendInput({ kind: "clipboard_write", text });
    const k = { key: "v", code: "KeyV", modifiers: 2 };
    sendControl({ kind: "key_down", ...k });
    sendControl({ kind: "key_up", ...k });
  }

  function onCompositionEnd(ev) {
    if (!s) return;
    const text = ev.data ?? "";
    sink.value = "";
    if (ready() && text !== "") sendInput({ kind: "text_insert", text });
  }

  for (const el of [sink, video]) {
    el.addEventListener("keydown", onKeyDown);
    el.addEventListener("keyup", onKeyUp);
    el.addEventListener("paste", onPaste);
    el.addEventListener("compositionend", onCompositionEnd);
  }
  // Nothing typed may accumulate in the sink outside a composition.
  // A key we sent as key_down types on the appliance: its keypress must
  // not also put text in the sink (synthetic keyboards send the text as a
  // separate char event that the keydown's preventDefault does not stop).
  sink.addEventListener("keypress", (ev) => {
    if (s && s.keySent) ev.preventDefault();
  });
  // Text that arrives without a key we sent (see onKeyDown) is inserted
  // as text.
  sink.addEventListener("input", (ev) => {
    if (ev.isComposing) return;
    if (s && ready() && ev.inputType === "insertText" && ev.data) sendInput({ kind: "text_insert", text: ev.data });
    sink.value = "";
  });

  // ---- input → changed frame ----

  const thumbCanvas = document.createElement("canvas");
  thumbCanvas.width = 160;
  thumbCanvas.height = 90;
  const thumbCtx = thumbCanvas.getContext("2d", { willReadFrequently: true });
  let probe = null;

  function thumb() {
    if (!video.videoWidth) return null;
    try {
      thumbCtx.drawImage(video, 0, 0, thumbCanvas.width, thumbCanvas.height);
      return thumbCtx.getImageData(0, 0, thumbCanvas.width, thumbCanvas.height).data;
    } catch {
      return null;
    }
  }

  // changed: a few pixels moved clearly (codec noise stays below the step).
  function changed(a, b) {
    let n = 0;
    for (let i = 0; i < a.length; i += 4) {
      if (Math.abs(a[i] - b[i]) > 40 || Math.abs(a[i + 1] - b[i + 1]) > 40 || Math.abs(a[i + 2] - b[i + 2]) > 40) {
        if (++n >= 2) return true;
      }
    }
    return false;
  }

  // probeFrame measures input → the next video frame that differs from the
  // one shown at input time, via requestVideoFrameCallback.
  function probeFrame(t0) {
    if (!video.requestVideoFrameCallback || probe) return;
    const ref = thumb();
    if (!ref) return;
    const mine = { t0, ref };
    probe = mine;
    const step = (now, meta) => {
      if (probe !== mine) return;
      if (now - t0 > FRAME_WAIT_MS) {
        probe = null;
        return;
      }
      const cur = thumb();
      if (cur && changed(ref, cur)) {
        const at = meta?.presentationTime ?? now;
        const ms = Math.max(0, Math.round(at - t0));
        tabcast.latency.frame = ms;
        ui.latencyFrame.textContent = `${ms} ms`;
        probe = null;
        return;
      }
      video.requestVideoFrameCallback(step);
    };
    video.requestVideoFrameCallback(step);
  }

  // For tests and operators: send any action (fields as in core/action);
  // control actions resolve with their final ack.
  tabcast.send = (kind, fields = {}) => {
    const a = { ...fields, kind };
    if (POINTER_KINDS.has(kind)) return Promise.resolve(sendPointer(a));
    return sendInput(a);
  };

  render();
  return { start, end, channel, render };
}
