// Offscreen document of the Tabcast tab-capture extension: turns a tab
// capture stream id into a track and sends it over a loopback-only
// RTCPeerConnection to the capture-tab plugin's Pion peer. The plugin calls
// tabcastStart over CDP. Signaling runs
// over the plugin's loopback WebSocket (authenticated by a per-stream
// secret in its URL).
'use strict';

const sessions = new Map(); // key -> session

function stopSession(key, why) {
  const s = sessions.get(key);
  if (!s) return;
  sessions.delete(key);
  if (s.sizeTimer) clearInterval(s.sizeTimer);
  if (why) s.send({type: 'ended', reason: why});
  try { s.media && s.media.getTracks().forEach((t) => t.stop()); } catch (e) {}
  try { s.pc && s.pc.close(); } catch (e) {}
  try { s.ws && s.ws.close(); } catch (e) {}
}

function preferCodec(tr, codec) {
  if (!tr.setCodecPreferences || !RTCRtpSender.getCapabilities) return;
  const all = RTCRtpSender.getCapabilities('video').codecs;
  const want = 'video/' + codec.toLowerCase();
  const first = all.filter((c) => c.mimeType.toLowerCase() === want);
  if (!first.length) return;
  const rest = all.filter((c) => c.mimeType.toLowerCase() !== want);
  tr.setCodecPreferences(first.concat(rest));
}

async function setParams(s, m) {
  const p = s.sender.getParameters();
  if (!p.encodings || !p.encodings.length) p.encodings = [{}];
  if (m.maxBitrateKbps > 0) p.encodings[0].maxBitrate = m.maxBitrateKbps * 1000;
  if (m.maxFps > 0) p.encodings[0].maxFramerate = m.maxFps;
  await s.sender.setParameters(p);
}

async function start(m) {
  stopSession(m.key);
  let media;
  {
    // The browser's --auto-select-tab-capture-source-by-title picks the tab
    // whose title the plugin set to its marker for this call.
    media = await navigator.mediaDevices.getDisplayMedia({
      audio: false,
      video: {width: {max: m.width || 1280}, height: {max: m.height || 720}, frameRate: {max: m.maxFps || 30}},
      selfBrowserSurface: 'exclude', surfaceSwitching: 'exclude', preferCurrentTab: false,
    });
  }
  {
    const t = media.getVideoTracks()[0];
    const st = t && t.getSettings ? t.getSettings() : {};
    if (!t || (st.displaySurface && st.displaySurface !== 'browser')) {
      media.getTracks().forEach((x) => x.stop());
      throw new Error('captured surface is ' + (st.displaySurface || 'none') + ', not a tab');
    }
  }
  const track = media.getVideoTracks()[0];
  // 'detail': screen content (sharp text, the screen-content encoder
  // settings). The core fits the window by the source size the track
  // reports, not by the encoded size, so the encoder may scale.
  track.contentHint = m.contentHint || 'detail';
  const s = {key: m.key, media, pc: null, ws: null, sender: null, queue: []};
  s.send = (o) => {
    if (s.ws && s.ws.readyState === WebSocket.OPEN) s.ws.send(JSON.stringify(o));
  };
  sessions.set(m.key, s);
  try {
    const ws = new WebSocket(m.wsURL);
    s.ws = ws;
    await new Promise((res, rej) => {
      ws.onopen = res;
      ws.onerror = () => rej(new Error('signaling WebSocket failed'));
      ws.onclose = () => rej(new Error('signaling WebSocket closed'));
    });
    ws.onerror = null;
    ws.onclose = () => stopSession(m.key);
    const pc = new RTCPeerConnection({iceServers: [], bundlePolicy: 'max-bundle', rtcpMuxPolicy: 'require'});
    s.pc = pc;
    const enc = {};
    if (m.maxBitrateKbps > 0) enc.maxBitrate = m.maxBitrateKbps * 1000;
    if (m.maxFps > 0) enc.maxFramerate = m.maxFps;
    const tr = pc.addTransceiver(track, {direction: 'sendonly', streams: [media], sendEncodings: [enc]});
    s.sender = tr.sender;
    try {
      const sp = tr.sender.getParameters();
      // Under a low bitrate cap scale the picture down rather than drop to
      // a frame every few seconds ('detail' alone implies keeping the
      // resolution): a moving page must keep moving.
      sp.degradationPreference = 'balanced';
      await tr.sender.setParameters(sp);
    } catch (e) { /* older browsers: their default */ }
    preferCodec(tr, m.codec || 'vp8');
    pc.onicecandidate = (e) => { if (e.candidate) s.send({type: 'candidate', candidate: e.candidate.toJSON()}); };
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === 'failed' || pc.connectionState === 'closed') stopSession(m.key, 'peer ' + pc.connectionState);
    };
    track.onended = () => stopSession(m.key, 'track ended');
    ws.onmessage = async (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      try {
        switch (msg.type) {
          case 'answer': await pc.setRemoteDescription({type: 'answer', sdp: msg.sdp}); break;
          case 'candidate': if (msg.candidate) await pc.addIceCandidate(msg.candidate); break;
          case 'params': await setParams(s, msg); s.send({type: 'paramsResult', id: msg.id}); break;
          case 'stop': stopSession(m.key); break;
        }
      } catch (e) {
        s.send({type: msg.type === 'params' ? 'paramsResult' : 'error', id: msg.id, error: String(e)});
      }
    };
    // The source size (the tab's view within the size limits, before the
    // encoder scales anything): the core fits the tab's window by it.
    let lastSize = '';
    s.sizeTimer = setInterval(() => {
      const st = track.getSettings ? track.getSettings() : {};
      const k = st.width + 'x' + st.height;
      if (st.width > 0 && st.height > 0 && k !== lastSize) {
        lastSize = k;
        s.send({type: 'size', width: st.width, height: st.height});
      }
    }, 250);
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    s.send({type: 'offer', sdp: pc.localDescription.sdp,
      settings: track.getSettings ? track.getSettings() : {}});
  } catch (e) {
    stopSession(m.key);
    throw e;
  }
}

// tabcastStart is called by the plugin over CDP (Runtime.evaluate with
// userGesture, which getDisplayMedia needs).
self.tabcastStart = async (m) => { await start(m); return {ok: true}; };
self.tabcastStop = (key) => { stopSession(key); return {ok: true}; };

chrome.runtime.onMessage.addListener((msg, _sender, reply) => {
  if (!msg || msg.to !== 'offscreen') return false;
  switch (msg.op) {
    case 'start':
      start(msg).then(() => reply({ok: true}), (e) => reply({error: String(e && e.message || e)}));
      return true;
    case 'stop':
      stopSession(msg.key);
      reply({ok: true});
      return false;
    case 'status':
      reply({ok: true, sessions: Array.from(sessions.keys())});
      return false;
  }
  return false;
});

// Keep the service worker alive while this document lives: an extension
// message resets its idle timer.
setInterval(() => { chrome.runtime.sendMessage({to: 'sw', op: 'ping'}).catch(() => {}); }, 20000);
