// Connection is one attempt at watching a session: the signaling
// WebSocket (docs/protocol.md, "Signaling") and the RTCPeerConnection it
// negotiates. The appliance is the offerer; this page answers. What the
// connection learns goes to its hooks; once closed it calls none.

const PING_EVERY_MS = 10000;
const PONG_TIMEOUT_MS = 10000;
const DISCONNECTED_GRACE_MS = 5000;

// CLOSE_ACCESS_WITHDRAWN and CLOSE_SESSION_NOT_FOUND are the server's own
// close codes (core/signaling).
const CLOSE_ACCESS_WITHDRAWN = 4403;
const CLOSE_SESSION_NOT_FOUND = 4404;

// applyICEServers adds the TURN servers (and the relay-only policy) a
// welcome or a restart offer carries to the peer connection.
function applyICEServers(pc, msg, onError) {
  if (!Array.isArray(msg.iceServers) || msg.iceServers.length === 0) return;
  const cfg = pc.getConfiguration();
  cfg.iceServers = msg.iceServers.map((s) => ({ urls: s.urls, username: s.username, credential: s.credential }));
  if (msg.iceTransportPolicy === "relay") cfg.iceTransportPolicy = "relay";
  try {
    pc.setConfiguration(cfg);
  } catch (err) {
    onError(`ice servers: ${err.message || err}`);
  }
}

export class Connection {
  // sessionId: the session to watch; hello: the hello message's fields
  // (codec, codecs, interactive); hooks (see the calls below):
  //   dataChannel(ch), track(ev), state(connectionState), connected(),
  //   lost(reason), withdrawn(), welcome(msg), snapshot(session),
  //   serverError(msg), status(text, isError), iceError(text)
  constructor(sessionId, hello, hooks) {
    this.hooks = hooks;
    this.closed = false;
    this.timers = []; // intervals cleared at close
    this.answered = false; // the answer went out: candidates may follow
    this.localPending = []; // our candidates gathered before that
    this.disconnectTimer = null;
    this.pongTimer = null;
    this.pushed = false; // the server pushed a session snapshot on this socket
    this.queue = Promise.resolve(); // server messages, handled in order

    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    this.ws = new WebSocket(`${proto}//${location.host}/api/v1/sessions/${encodeURIComponent(sessionId)}/signal`);
    this.pc = new RTCPeerConnection();
    this.watchPeer();
    this.watchSocket(hello);
  }

  get live() { return !this.closed; }

  // pushing: the socket is up and the server pushes the session snapshot
  // over it, so nobody needs to poll it.
  get pushing() {
    return this.live && this.pushed && this.ws.readyState === WebSocket.OPEN;
  }

  send(msg) {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  // every runs fn every ms while the connection is live.
  every(ms, fn) {
    this.timers.push(setInterval(() => {
      if (this.live) fn();
    }, ms));
  }

  // close ends the socket and the peer without another hook call.
  close() {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.disconnectTimer);
    clearTimeout(this.pongTimer);
    try { this.ws.close(1000, "bye"); } catch { /* already closed */ }
    try { this.pc.close(); } catch { /* already closed */ }
  }

  // bye tells the server this page is going away (pagehide).
  bye() {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "bye" }));
  }

  watchPeer() {
    const pc = this.pc;
    const h = this.hooks;
    pc.ondatachannel = (ev) => {
      if (this.live) h.dataChannel(ev.channel);
    };
    pc.ontrack = (ev) => {
      if (this.live) h.track(ev);
    };
    pc.onicecandidate = (ev) => {
      if (!this.live || !ev.candidate || !ev.candidate.candidate) return;
      const cand = ev.candidate.toJSON();
      if (this.answered) this.send({ type: "candidate", candidate: cand });
      else this.localPending.push(cand);
    };
    pc.onconnectionstatechange = () => {
      if (!this.live) return;
      const s = pc.connectionState;
      h.state(s);
      clearTimeout(this.disconnectTimer);
      if (s === "connected") {
        h.connected();
      } else if (s === "failed") {
        h.lost("Connection failed");
      } else if (s === "disconnected") {
        // Often recovers by itself; give it a moment before starting over.
        this.disconnectTimer = setTimeout(() => {
          if (this.live && pc.connectionState !== "connected") h.lost("Connection lost");
        }, DISCONNECTED_GRACE_MS);
      }
    };
  }

  watchSocket(hello) {
    const ws = this.ws;
    const h = this.hooks;
    // Messages are handled one at a time, in order: a candidate must wait
    // for the offer before it to be applied.
    ws.onmessage = (ev) => {
      if (!this.live) return;
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch {
        h.status("server sent a malformed message", true);
        return;
      }
      this.queue = this.queue.then(() => this.handle(msg)).catch((err) => {
        if (!this.live) return;
        h.status(`signaling: ${err.name || "error"}`, true);
        h.lost("Signaling error");
      });
    };
    ws.onopen = () => {
      if (!this.live) return;
      this.send({ type: "hello", ...hello });
      this.every(PING_EVERY_MS, () => {
        this.send({ type: "ping" });
        if (!this.pongTimer) {
          this.pongTimer = setTimeout(() => {
            if (this.live) h.lost("Server not answering");
          }, PONG_TIMEOUT_MS);
        }
      });
    };
    ws.onclose = (ev) => {
      if (!this.live) return;
      if (ev.code === CLOSE_ACCESS_WITHDRAWN) {
        // Access withdrawn (token revoked, invitation withdrawn, user or
        // password changed): retrying with the same credentials cannot work.
        h.withdrawn();
        return;
      }
      h.lost(ev.code === CLOSE_SESSION_NOT_FOUND ? "Session not found" : "Signaling closed");
    };
    ws.onerror = () => { /* onclose follows */ };
  }

  async handle(msg) {
    if (!this.live) return;
    const pc = this.pc;
    const h = this.hooks;
    switch (msg.type) {
      case "welcome":
        // The appliance's relay, with a credential for this peer only.
        applyICEServers(pc, msg, h.iceError);
        h.welcome(msg);
        break;
      case "offer": {
        // An ICE restart brings fresh relay credentials with its offer.
        applyICEServers(pc, msg, h.iceError);
        await pc.setRemoteDescription({ type: "offer", sdp: msg.sdp });
        const answer = await pc.createAnswer();
        await pc.setLocalDescription(answer);
        if (!this.live) return;
        this.send({ type: "answer", sdp: pc.localDescription.sdp });
        this.answered = true;
        for (const cand of this.localPending) this.send({ type: "candidate", candidate: cand });
        this.localPending = [];
        break;
      }
      case "candidate":
        if (msg.candidate) await pc.addIceCandidate(msg.candidate);
        break;
      case "state":
        // The server's view of the peer; ours is shown from the RTCPeerConnection.
        break;
      case "snapshot":
        // The server pushes the session snapshot whenever it changes.
        this.pushed = true;
        if (msg.session) h.snapshot(msg.session);
        break;
      case "pong":
        clearTimeout(this.pongTimer);
        this.pongTimer = null;
        break;
      case "error":
        h.serverError(msg);
        break;
      default:
        break;
    }
  }
}
