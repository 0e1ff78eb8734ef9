// Tabcast viewer panel: picks a session, runs the signaling protocol
// (docs/protocol.md, "Signaling") over a WebSocket and plays the stream.
// The appliance is the offerer; this page answers. Input travels on the
// peer's DataChannels (input.js). Plain ES modules, no build.

import { createInput } from "./input.js";
import { api, whoami } from "./api.js";
import { mountHeader } from "./header.js";

const MIN_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 10000;
const PING_EVERY_MS = 10000;
const PONG_TIMEOUT_MS = 10000;
const DISCONNECTED_GRACE_MS = 5000;
const STATS_EVERY_MS = 1000;
const SNAPSHOT_EVERY_MS = 3000;

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const ui = {
  video: $("session-video"),
  title: $("session-title"),
  url: $("session-url"),
  state: $("conn-state"),
  conn: document.querySelector(".conn"),
  overlay: $("overlay"),
  reconnect: $("reconnect"),
  status: $("status-line"),
  codec: $("stat-codec"),
  resolution: $("stat-resolution"),
  fps: $("stat-fps"),
  bitrate: $("stat-bitrate"),
  rtt: $("stat-rtt"),
  candidate: $("stat-candidate"),
  sink: $("keyboard-sink"),
  inputState: $("input-state"),
  back: $("nav-back"),
  forward: $("nav-forward"),
  reload: $("nav-reload"),
  address: $("address"),
  tabs: $("tabs"),
  addressForm: $("address-form"),
  latencyAck: $("latency-ack"),
  latencyFrame: $("latency-frame"),
  dialog: $("dialog"),
  dialogKind: $("dialog-kind"),
  dialogMessage: $("dialog-message"),
  dialogPrompt: $("dialog-prompt"),
  dialogAccept: $("dialog-accept"),
  dialogDismiss: $("dialog-dismiss"),
  clipboardOut: $("clipboard-out"),
  clipboardText: $("clipboard-text"),
  clipboardClose: $("clipboard-close"),
  sessionState: $("session-state"),
  viewers: $("session-viewers"),
  fullscreen: $("fullscreen"),
  stage: document.querySelector(".stage"),
};

const params = new URLSearchParams(location.search);
const wantCodec = (params.get("codec") || "auto").toLowerCase();
// ?interactive=0 watches without a producer grant.
const wantInput = params.get("interactive") !== "0";

// Exposed for tests and for curious operators.
const tabcast = {
  pc: null,
  state: "new",
  session: null,
  codec: null,
  peerId: null,
  attempt: 0,
  errors: [],
};
window.tabcast = tabcast;

let generation = 0; // bumps on every (re)connect; stale callbacks check it
let current = null; // {gen, ws, pc, timers}
let attempt = 0;
let reconnectTimer = null;

const input = createInput({
  ui,
  setStatus,
  // The viewer's send limit: the appliance's a=max-message-size as this
  // browser's SCTP transport reports it.
  maxMessageSize: () => current?.pc?.sctp?.maxMessageSize || 0,
  // A closed control or pointer channel ended the producer: a new peer
  // brings a new grant.
  onEnded: (why) => {
    if (current && current.pc.connectionState === "connected") scheduleReconnect(`Input ${why}`);
  },
});

function setStatus(text, isError = false) {
  ui.status.textContent = text;
  ui.status.classList.toggle("error", isError);
}

function setState(state) {
  tabcast.state = state;
  ui.state.textContent = state;
  ui.conn.dataset.state = state;
  if (state === "connected") {
    ui.overlay.hidden = true;
  }
}

function showOverlay(text) {
  ui.reconnect.textContent = text;
  ui.overlay.hidden = false;
}

// Codecs this browser can decode, as protocol names.
function viewerCodecs() {
  const names = new Set();
  const caps = window.RTCRtpReceiver?.getCapabilities?.("video");
  for (const c of caps?.codecs ?? []) {
    const m = c.mimeType.toLowerCase();
    if (m === "video/h264") names.add("h264");
    if (m === "video/vp8") names.add("vp8");
  }
  return [...names];
}

// pickSession: a reconnect goes back to the session it showed, which a
// crash recovery keeps (or, for the default session, brings back) under
// the same id, unless that one was closed; otherwise ?session= or the
// first live session.
async function pickSession() {
  mountHeader(await whoami());
  const body = await api("GET", "/api/v1/sessions");
  if (!Array.isArray(body.sessions)) throw new Error("session list: bad response");
  const shown = tabcast.session && body.sessions.find((x) => x.id === tabcast.session);
  if (shown && shown.state !== "closed" && shown.state !== "closing") return shown;
  const want = params.get("session");
  const live = (x) => !["closed", "closing", "failed"].includes(x.state);
  const s = want ? body.sessions.find((x) => x.id === want) : body.sessions.find(live);
  if (!s) throw new Error(want ? `session ${want} not found` : "no session is running");
  return s;
}

// applyICEServers adds the TURN servers (and the relay-only policy) a
// welcome or a restart offer carries to the peer connection.
function applyICEServers(pc, msg) {
  if (!Array.isArray(msg.iceServers) || msg.iceServers.length === 0) return;
  const cfg = pc.getConfiguration();
  cfg.iceServers = msg.iceServers.map((s) => ({ urls: s.urls, username: s.username, credential: s.credential }));
  if (msg.iceTransportPolicy === "relay") cfg.iceTransportPolicy = "relay";
  try {
    pc.setConfiguration(cfg);
  } catch (err) {
    tabcast.errors.push(`ice servers: ${err.message || err}`);
  }
}

function showSession(s) {
  tabcast.session = s.id;
  ui.title.textContent = s.title || s.id;
  ui.url.textContent = s.url || "";
  document.title = `${s.title || s.id} · Tabcast`;
  showSnapshot(s);
}

// showSnapshot shows what the session snapshot says besides the page: its
// state and who watches it (viewers; producers are those with input).
function showSnapshot(s) {
  tabcast.snapshot = {
    id: s.id, state: s.state, title: s.title, url: s.url, owner: s.owner || "",
    viewers: s.viewers ?? 0, producers: s.producers ?? 0, invited: Array.isArray(s.invited) ? [...s.invited] : [],
  };
  // recovering (a crashed page or browser coming back) shows like any
  // state; a page left crashed shows while the session is ready.
  const label = s.state === "ready" && s.pageError ? `page ${s.pageError.replace(/_/g, " ")}` : s.state || "";
  ui.sessionState.textContent = label;
  ui.sessionState.dataset.state = s.state || "";
  ui.sessionState.hidden = !label || label === "ready";
  ui.sessionState.title = s.terminalReason || s.recovering || s.pageError || "";
  showRecovery(s.lastRecovery);
  const v = s.viewers ?? 0;
  const p = s.producers ?? 0;
  ui.viewers.textContent = `${v} watching${p ? ` · ${p} with input` : " · nobody with input"}`;
  ui.viewers.dataset.viewers = String(v);
  ui.viewers.dataset.producers = String(p);
  ui.viewers.hidden = false;
  showViewerTable(s.viewerDetails);
  showHandoff(s);
  showTabs(s);
}

// showRecovery says once that the session came back from a crash: a
// renderer is back in well under a second, too soon for the state
// recovering to show.
let recoveryShown;
function showRecovery(r) {
  const at = r?.at || "";
  if (recoveryShown !== undefined && at && at !== recoveryShown) {
    const what = { renderer_crashed: "page crash", renderer_hung: "hung page", browser_crashed: "browser crash" }[r.reason] || "crash";
    setStatus(`Recovered from a ${what} in ${(r.tookMs / 1000).toFixed(1)} s`);
  }
  recoveryShown = at;
}

// showTabs lists the session's tabs (a popup the page opened, or an agent's
// tabs new) when there is more than one; picking one switches the session
// to it, as an agent's tabs switch does. The list is fetched again only
// when the snapshot's tab count, page or title changed.
let tabsKey = "";
async function showTabs(s) {
  const n = s.tabs ?? 1;
  const key = `${s.id}|${n}|${s.pageRevision ?? ""}|${s.url || ""}|${s.title || ""}`;
  if (key === tabsKey) return;
  tabsKey = key;
  if (n < 2) {
    ui.tabs.hidden = true;
    ui.tabs.replaceChildren();
    return;
  }
  try {
    const r = await api("POST", `/api/v1/sessions/${encodeURIComponent(s.id)}/agent`, { command: "tabs" });
    if (tabsKey !== key) return; // a newer snapshot is being shown
    const tabs = Array.isArray(r.data?.tabs) ? r.data.tabs : [];
    ui.tabs.replaceChildren(...tabs.map((t) => {
      const o = document.createElement("option");
      o.value = t.id;
      o.textContent = (t.title || t.url || `tab ${t.index + 1}`).slice(0, 60);
      o.selected = !!t.current;
      return o;
    }));
    ui.tabs.hidden = tabs.length < 2;
  } catch (err) {
    ui.tabs.hidden = true; // no right to list them (e.g. watch-only)
    tabcast.errors.push(`tabs: ${err.message || err}`);
  }
}

ui.tabs.addEventListener("change", async () => {
  const id = tabcast.session;
  if (!id) return;
  try {
    await api("POST", `/api/v1/sessions/${encodeURIComponent(id)}/agent`, { command: "tabs", op: "switch", tabId: ui.tabs.value });
  } catch (err) {
    tabcast.errors.push(`tabs switch: ${err.message || err}`);
  }
  tabsKey = ""; // list them again with the next snapshot
});

// showViewerTable lists every viewer's transport from the snapshot: path
// (relay or direct, udp or tcp), RTT and loss from its receiver reports,
// and the appliance's bandwidth estimate for it.
function showViewerTable(list) {
  const table = $("viewer-table");
  const rows = Array.isArray(list) ? list : [];
  table.hidden = rows.length === 0;
  table.tBodies[0].replaceChildren(...rows.map((v) => {
    const tr = document.createElement("tr");
    tr.dataset.testid = "viewer-row";
    tr.dataset.path = v.path || "";
    const cell = (text, poor) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (poor) td.dataset.poor = "true";
      return td;
    };
    const who = (v.user || "viewer") + (v.interactive ? " ✎" : "") + (v.peer === tabcast.peerId ? " (you)" : "");
    const path = v.path ? `${v.path}/${v.protocol || "udp"}` : "connecting";
    const rtt = v.rttMs > 0 ? `${Math.round(v.rttMs)} ms` : "–";
    const loss = `${(v.lossPct || 0).toFixed(1)} %`;
    const rate = v.estimateKbps >= 1000 ? `${(v.estimateKbps / 1000).toFixed(1)} Mb/s` : `${v.estimateKbps || 0} kb/s`;
    tr.append(cell(who), cell(path), cell(rtt, v.rttMs > 150), cell(loss, v.lossPct > 2), cell(rate, v.estimateKbps > 0 && v.estimateKbps < 1000));
    return tr;
  }));
}

// Hand-off: an agent's request for a person (banner + Done), and the take /
// release button of a session with exclusive control.
const handoffUI = {
  banner: $("human-banner"), reason: $("human-reason"), done: $("human-done"), control: $("take-control"),
};
let pendingHuman = null;
let controlHeld = false;

function showHandoff(s) {
  const reqs = Array.isArray(s.humanRequests) ? s.humanRequests : [];
  pendingHuman = reqs.length ? reqs[0] : null;
  handoffUI.banner.hidden = !pendingHuman;
  if (pendingHuman) handoffUI.reason.textContent = pendingHuman.reason; // text, never HTML
  const ctl = s.control || {};
  handoffUI.control.hidden = ctl.policy !== "exclusive";
  controlHeld = !!ctl.holder;
  handoffUI.control.textContent = controlHeld ? `Release control (${ctl.holder})` : "Take control";
  handoffUI.control.dataset.holder = ctl.holder || "";
  tabcast.snapshot.control = { policy: ctl.policy || "shared", holder: ctl.holder || "" };
  tabcast.snapshot.humanRequests = reqs.map((r) => ({ id: r.id, reason: r.reason }));
}

handoffUI.done.addEventListener("click", async () => {
  if (!pendingHuman || !tabcast.session) return;
  handoffUI.done.disabled = true;
  try {
    await api("POST", `/api/v1/sessions/${encodeURIComponent(tabcast.session)}/human/${encodeURIComponent(pendingHuman.id)}/done`);
    handoffUI.banner.hidden = true;
  } catch (err) {
    setStatus(String(err.message || err), true);
  } finally {
    handoffUI.done.disabled = false;
  }
});

handoffUI.control.addEventListener("click", async () => {
  if (!tabcast.session) return;
  try {
    const out = await api("POST", `/api/v1/sessions/${encodeURIComponent(tabcast.session)}/control`, { action: controlHeld ? "release" : "take" });
    if (out.session) showSnapshot(out.session);
  } catch (err) {
    setStatus(String(err.message || err), true);
  }
});

// The snapshot poll keeps title, URL, state and the viewer counts fresh
// while the stream plays (the stream itself carries none of them).
let snapshotTimer = null;
async function pollSnapshot() {
  clearTimeout(snapshotTimer);
  const id = tabcast.session;
  try {
    if (id && !document.hidden) {
      const out = await api("GET", `/api/v1/sessions/${encodeURIComponent(id)}`);
      const s = out.session;
      if (s && s.id === tabcast.session) {
        if (s.title) ui.title.textContent = s.title;
        if (s.url) ui.url.textContent = s.url;
        document.title = `${s.title || s.id} · Tabcast`;
        showSnapshot(s);
      }
    }
  } catch (err) {
    if (err.status === 404 && id === tabcast.session) {
      ui.sessionState.textContent = "gone";
      ui.sessionState.dataset.state = "closed";
      ui.sessionState.hidden = false;
    }
  } finally {
    snapshotTimer = setTimeout(pollSnapshot, SNAPSHOT_EVERY_MS);
  }
}

// Full screen shows the stage (video, dialogs, stats) alone.
ui.fullscreen.hidden = !ui.stage.requestFullscreen;
ui.fullscreen.addEventListener("click", async () => {
  try {
    if (document.fullscreenElement) await document.exitFullscreen();
    else await ui.stage.requestFullscreen({ navigationUI: "hide" });
  } catch (err) {
    setStatus(`Full screen refused: ${err.message || err}`, true);
  }
});
document.addEventListener("fullscreenchange", () => {
  const on = document.fullscreenElement === ui.stage;
  ui.fullscreen.setAttribute("aria-pressed", String(on));
  ui.fullscreen.title = on ? "Leave full screen" : "Full screen";
  tabcast.fullscreen = on;
  if (on) ui.video.focus({ preventScroll: true });
});

function scheduleReconnect(reason) {
  if (reconnectTimer) return;
  teardown();
  const delay = Math.min(MAX_BACKOFF_MS, MIN_BACKOFF_MS * 2 ** attempt);
  attempt++;
  tabcast.attempt = attempt;
  if (!ui.status.classList.contains("error")) setStatus(`${reason}; reconnecting`);
  let left = Math.round(delay / 1000);
  const tick = () => showOverlay(`${reason} — reconnecting in ${left} s…`);
  tick();
  const countdown = setInterval(() => {
    left = Math.max(0, left - 1);
    tick();
  }, 1000);
  reconnectTimer = setTimeout(() => {
    clearInterval(countdown);
    reconnectTimer = null;
    showOverlay("Reconnecting…");
    start();
  }, delay);
}

// teardown closes the current socket and peer without triggering another
// reconnect (their callbacks see a newer generation).
function teardown() {
  const c = current;
  current = null;
  generation++;
  input.end();
  if (!c) return;
  for (const t of c.timers) clearInterval(t);
  clearTimeout(c.disconnectTimer);
  clearTimeout(c.pongTimer);
  try { c.ws.close(1000, "bye"); } catch { /* already closed */ }
  try { c.pc.close(); } catch { /* already closed */ }
  setState("closed");
  for (const k of ["codec", "resolution", "fps", "bitrate", "rtt", "candidate"]) ui[k].textContent = "–";
}

async function start() {
  const gen = ++generation;
  try {
    const s = await pickSession();
    if (gen !== generation) return;
    showSession(s);
    if (!snapshotTimer) snapshotTimer = setTimeout(pollSnapshot, SNAPSHOT_EVERY_MS);
  } catch (err) {
    if (gen !== generation) return;
    setStatus(String(err.message || err), true);
    scheduleReconnect("No session");
    return;
  }
  connect(gen);
}

function connect(gen) {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${proto}//${location.host}/api/v1/sessions/${encodeURIComponent(tabcast.session)}/signal`;
  const ws = new WebSocket(url);
  const pc = new RTCPeerConnection();
  const c = { gen, ws, pc, timers: [], answered: false, localPending: [], disconnectTimer: null, pongTimer: null };
  current = c;
  tabcast.pc = pc;
  setState(pc.connectionState);
  const live = () => current === c && gen === generation;
  const send = (msg) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
  };

  pc.ondatachannel = (ev) => {
    if (live()) input.channel(ev.channel);
  };
  pc.ontrack = (ev) => {
    if (!live()) return;
    ui.video.srcObject = ev.streams[0] ?? new MediaStream([ev.track]);
    ui.video.play().catch(() => { /* autoplay is muted; ignore */ });
  };
  pc.onicecandidate = (ev) => {
    if (!live() || !ev.candidate || !ev.candidate.candidate) return;
    const cand = ev.candidate.toJSON();
    if (c.answered) send({ type: "candidate", candidate: cand });
    else c.localPending.push(cand);
  };
  pc.onconnectionstatechange = () => {
    if (!live()) return;
    const s = pc.connectionState;
    setState(s);
    clearTimeout(c.disconnectTimer);
    if (s === "connected") {
      // The counts changed with this viewer: show them soon.
      clearTimeout(snapshotTimer);
      snapshotTimer = setTimeout(pollSnapshot, 800);
      attempt = 0;
      tabcast.attempt = 0;
      setStatus(`Streaming ${tabcast.codec ?? ""}`.trim());
    } else if (s === "failed") {
      scheduleReconnect("Connection failed");
    } else if (s === "disconnected") {
      // Often recovers by itself; give it a moment before starting over.
      c.disconnectTimer = setTimeout(() => {
        if (live() && pc.connectionState !== "connected") scheduleReconnect("Connection lost");
      }, DISCONNECTED_GRACE_MS);
    }
  };

  // Messages are handled one at a time, in order: a candidate must wait
  // for the offer before it to be applied.
  let queue = Promise.resolve();
  ws.onmessage = (ev) => {
    if (!live()) return;
    let msg;
    try {
      msg = JSON.parse(ev.data);
    } catch {
      setStatus("server sent a malformed message", true);
      return;
    }
    queue = queue.then(() => handle(msg)).catch((err) => {
      if (!live()) return;
      setStatus(`signaling: ${err.name || "error"}`, true);
      scheduleReconnect("Signaling error");
    });
  };
  ws.onopen = () => {
    if (!live()) return;
    send({ type: "hello", codec: wantCodec, codecs: viewerCodecs(), interactive: wantInput });
    c.timers.push(setInterval(() => {
      send({ type: "ping" });
      if (!c.pongTimer) {
        c.pongTimer = setTimeout(() => {
          if (live()) scheduleReconnect("Server not answering");
        }, PONG_TIMEOUT_MS);
      }
    }, PING_EVERY_MS));
  };
  ws.onclose = (ev) => {
    if (!live()) return;
    if (ev.code === 4403) {
      // Access withdrawn (token revoked, invitation withdrawn, user or
      // password changed): retrying with the same credentials cannot work.
      teardown();
      setStatus("access withdrawn", true);
      showOverlay("Your access to this session was withdrawn. Sign in again to watch.");
      return;
    }
    const why = ev.code === 4404 ? "Session not found" : "Signaling closed";
    scheduleReconnect(why);
  };
  ws.onerror = () => { /* onclose follows */ };

  async function handle(msg) {
    if (!live()) return;
    switch (msg.type) {
      case "welcome":
        tabcast.codec = msg.codec;
        tabcast.peerId = msg.peerId;
        // The appliance's relay, with a credential for this peer only.
        applyICEServers(pc, msg);
        // New peer, new grant: sequence numbers start over.
        input.start(msg);
        setStatus(`Negotiating ${msg.codec}…`);
        break;
      case "offer": {
        // An ICE restart brings fresh relay credentials with its offer.
        applyICEServers(pc, msg);
        await pc.setRemoteDescription({ type: "offer", sdp: msg.sdp });
        const answer = await pc.createAnswer();
        await pc.setLocalDescription(answer);
        if (!live()) return;
        send({ type: "answer", sdp: pc.localDescription.sdp });
        c.answered = true;
        for (const cand of c.localPending) send({ type: "candidate", candidate: cand });
        c.localPending = [];
        break;
      }
      case "candidate":
        if (msg.candidate) await pc.addIceCandidate(msg.candidate);
        break;
      case "state":
        // The server's view of the peer; ours is shown from the RTCPeerConnection.
        break;
      case "snapshot": {
        // A server that pushes the session snapshot saves waiting for the poll.
        const s = msg.session;
        if (s && s.id === tabcast.session) {
          if (s.title) ui.title.textContent = s.title;
          if (s.url) ui.url.textContent = s.url;
          showSnapshot(s);
        }
        break;
      }
      case "pong":
        clearTimeout(c.pongTimer);
        c.pongTimer = null;
        break;
      case "error": {
        const text = `${msg.code}: ${msg.message}`;
        tabcast.errors.push({ code: msg.code, message: msg.message });
        if (tabcast.errors.length > 20) tabcast.errors.shift();
        setStatus(text, true);
        // These end this attempt; anything else is reported and ignored.
        if (msg.code === "permission_denied") {
          // Input withdrawn (a role lowered): the picture goes on. A full
          // withdrawal follows with close 4403.
          setStatus("view only: your access to act was withdrawn", true);
        }
        if (["session_not_found", "capacity_exceeded", "codec_unsupported", "internal"].includes(msg.code)) {
          scheduleReconnect(msg.code.replace(/_/g, " "));
        }
        break;
      }
      default:
        break;
    }
  }

  c.timers.push(setInterval(() => {
    if (live()) updateStats(c).catch(() => { /* peer closing */ });
  }, STATS_EVERY_MS));
}

// Live stats from getStats: codec, size, fps, bitrate (from the bytes
// delta), RTT of the selected pair and the local candidate type.
async function updateStats(c) {
  const report = await c.pc.getStats();
  let inbound = null;
  let pair = null;
  let selectedPairId = null;
  report.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "video") inbound = s;
    if (s.type === "transport" && s.selectedCandidatePairId) selectedPairId = s.selectedCandidatePairId;
  });
  if (selectedPairId) pair = report.get(selectedPairId);
  if (!pair) {
    report.forEach((s) => {
      if (s.type === "candidate-pair" && s.nominated && s.state === "succeeded") pair = s;
    });
  }
  if (inbound) {
    const codec = inbound.codecId ? report.get(inbound.codecId) : null;
    ui.codec.textContent = codec?.mimeType?.replace("video/", "") ?? "–";
    ui.resolution.textContent = inbound.frameWidth ? `${inbound.frameWidth}×${inbound.frameHeight}` : "–";
    ui.fps.textContent = inbound.framesPerSecond != null ? String(Math.round(inbound.framesPerSecond)) : "–";
    const now = inbound.timestamp;
    if (c.lastBytes != null && now > c.lastTs) {
      const kbps = ((inbound.bytesReceived - c.lastBytes) * 8) / (now - c.lastTs);
      ui.bitrate.textContent = kbps >= 1000 ? `${(kbps / 1000).toFixed(2)} Mbit/s` : `${Math.round(kbps)} kbit/s`;
    }
    c.lastBytes = inbound.bytesReceived;
    c.lastTs = now;
  }
  if (pair) {
    ui.rtt.textContent = pair.currentRoundTripTime != null ? `${Math.round(pair.currentRoundTripTime * 1000)} ms` : "–";
    const local = report.get(pair.localCandidateId);
    // Path and transport: host/udp, relay/tcp (TURN over TCP), relay/tls...
    const transport = local?.relayProtocol || local?.protocol;
    ui.candidate.textContent = local?.candidateType ? local.candidateType + (transport ? `/${transport}` : "") : "–";
  }
}

window.addEventListener("pagehide", () => {
  const c = current;
  if (c && c.ws.readyState === WebSocket.OPEN) c.ws.send(JSON.stringify({ type: "bye" }));
});

start();
