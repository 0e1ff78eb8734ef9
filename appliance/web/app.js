// Tabcast viewer panel: picks a session, watches it over one Connection at
// a time (signaling.js) and starts over, with backoff, when one ends. The
// parts:
//   signaling.js  the WebSocket and the RTCPeerConnection of one attempt
//   view.js       what the session snapshot says (state, viewers, tabs…)
//   stats.js      the stream's live stats
//   input.js      human input over the peer's DataChannels
// Plain ES modules, no build.

import { api, whoami } from "./api.js";
import { $, setStatus } from "./dom.js";
import { mountHeader } from "./header.js";
import { createInput } from "./input.js";
import { Connection } from "./signaling.js";
import { Stats, clearStats } from "./stats.js";
import { SessionView } from "./view.js";

const MIN_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 10000;
const STATS_EVERY_MS = 1000;
// While the signaling socket is down (or its server does not push), the
// session snapshot is polled this often; while it is up it is pushed.
const SNAPSHOT_POLL_MS = 3000;

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

// life is the panel's one piece of connection state.
const life = {
  generation: 0, // bumps on every (re)connect; a stale start checks it
  current: null, // the live Connection, if any
  attempt: 0, // failed attempts in a row: the backoff
  reconnectTimer: null,
  pollTimer: null,
};

const view = new SessionView(ui, tabcast, setStatus);

const input = createInput({
  ui,
  setStatus,
  // The viewer's send limit: the appliance's a=max-message-size as this
  // browser's SCTP transport reports it.
  maxMessageSize: () => life.current?.pc?.sctp?.maxMessageSize || 0,
  // A closed control or pointer channel ended the producer: a new peer
  // brings a new grant.
  onEnded: (why) => {
    if (life.current && life.current.pc.connectionState === "connected") scheduleReconnect(`Input ${why}`);
  },
});

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

// pollSnapshot keeps title, URL, state and the viewer counts fresh while
// nothing pushes them: the signaling socket is down (reconnecting), or
// its server does not push. While the socket pushes, it asks nothing.
async function pollSnapshot() {
  clearTimeout(life.pollTimer);
  const id = tabcast.session;
  try {
    if (id && !document.hidden && !life.current?.pushing) {
      const out = await api("GET", `/api/v1/sessions/${encodeURIComponent(id)}`);
      if (!life.current?.pushing) view.update(out.session, true);
    }
  } catch (err) {
    if (err.status === 404 && id === tabcast.session) view.gone();
  } finally {
    life.pollTimer = setTimeout(pollSnapshot, SNAPSHOT_POLL_MS);
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
  if (life.reconnectTimer) return;
  teardown();
  const delay = Math.min(MAX_BACKOFF_MS, MIN_BACKOFF_MS * 2 ** life.attempt);
  life.attempt++;
  tabcast.attempt = life.attempt;
  if (!ui.status.classList.contains("error")) setStatus(`${reason}; reconnecting`);
  let left = Math.round(delay / 1000);
  const tick = () => showOverlay(`${reason} — reconnecting in ${left} s…`);
  tick();
  const countdown = setInterval(() => {
    left = Math.max(0, left - 1);
    tick();
  }, 1000);
  life.reconnectTimer = setTimeout(() => {
    clearInterval(countdown);
    life.reconnectTimer = null;
    showOverlay("Reconnecting…");
    start();
  }, delay);
}

// teardown closes the current connection without triggering another
// reconnect (a closed Connection calls no hook).
function teardown() {
  const c = life.current;
  life.current = null;
  life.generation++;
  input.end();
  if (!c) return;
  c.close();
  setState("closed");
  clearStats(ui);
}

async function start() {
  const gen = ++life.generation;
  try {
    const s = await pickSession();
    if (gen !== life.generation) return;
    view.showSession(s);
    if (!life.pollTimer) life.pollTimer = setTimeout(pollSnapshot, SNAPSHOT_POLL_MS);
  } catch (err) {
    if (gen !== life.generation) return;
    setStatus(String(err.message || err), true);
    scheduleReconnect("No session");
    return;
  }
  connect();
}

// connect opens a Connection to the session shown and wires it to the page.
function connect() {
  const hello = { codec: wantCodec, codecs: viewerCodecs(), interactive: wantInput };
  const c = new Connection(tabcast.session, hello, {
    dataChannel: (ch) => input.channel(ch),
    track: (ev) => {
      ui.video.srcObject = ev.streams[0] ?? new MediaStream([ev.track]);
      ui.video.play().catch(() => { /* autoplay is muted; ignore */ });
    },
    state: setState,
    connected: () => {
      life.attempt = 0;
      tabcast.attempt = 0;
      setStatus(`Streaming ${tabcast.codec ?? ""}`.trim());
    },
    lost: scheduleReconnect,
    withdrawn: () => {
      teardown();
      setStatus("access withdrawn", true);
      showOverlay("Your access to this session was withdrawn. Sign in again to watch.");
    },
    welcome: (msg) => {
      tabcast.codec = msg.codec;
      tabcast.peerId = msg.peerId;
      // New peer, new grant: sequence numbers start over.
      input.start(msg);
      setStatus(`Negotiating ${msg.codec}…`);
    },
    snapshot: (s) => view.update(s, false),
    serverError: (msg) => {
      tabcast.errors.push({ code: msg.code, message: msg.message });
      if (tabcast.errors.length > 20) tabcast.errors.shift();
      setStatus(`${msg.code}: ${msg.message}`, true);
      // These end this attempt; anything else is reported and ignored.
      if (msg.code === "permission_denied") {
        // Input withdrawn (a role lowered): the picture goes on. A full
        // withdrawal follows with close 4403.
        setStatus("view only: your access to act was withdrawn", true);
      }
      if (["session_not_found", "capacity_exceeded", "codec_unsupported", "internal"].includes(msg.code)) {
        scheduleReconnect(msg.code.replace(/_/g, " "));
      }
    },
    status: setStatus,
    iceError: (text) => tabcast.errors.push(text),
  });
  life.current = c;
  tabcast.pc = c.pc;
  setState(c.pc.connectionState);
  const stats = new Stats(c.pc, ui);
  c.every(STATS_EVERY_MS, () => stats.update().catch(() => { /* peer closing */ }));
}

window.addEventListener("pagehide", () => life.current?.bye());

start();
