// Service worker of the Tabcast tab-capture extension. It keeps the
// offscreen document alive (the capture-tab plugin drives that document over
// CDP; it holds the MediaStreamTracks and the loopback RTCPeerConnections)
// and recreates it when the plugin asks (self.tabcast.ensure()).
'use strict';

let offscreenPromise = null;

async function hasOffscreen() {
  const ctxs = await chrome.runtime.getContexts({contextTypes: ['OFFSCREEN_DOCUMENT']});
  return ctxs.length > 0;
}

function ensureOffscreen() {
  if (!offscreenPromise) {
    offscreenPromise = (async () => {
      if (!(await hasOffscreen())) {
        await chrome.offscreen.createDocument({
          url: 'offscreen.html',
          reasons: ['DISPLAY_MEDIA', 'USER_MEDIA'],
          justification: 'Encodes the captured tab for the local Tabcast capture-tab plugin.',
        });
      }
    })().finally(() => { offscreenPromise = null; });
  }
  return offscreenPromise;
}

async function toOffscreen(msg) {
  await ensureOffscreen();
  const res = await chrome.runtime.sendMessage(Object.assign({to: 'offscreen'}, msg));
  if (!res) throw new Error('offscreen document did not answer');
  if (res.error) throw new Error(res.error);
  return res;
}

self.tabcast = {
  ready: false,
  // ensure (re)creates the offscreen document.
  async ensure() { await ensureOffscreen(); return {}; },
  // debug helper for tests: the offscreen document's view.
  async status() {
    if (!(await hasOffscreen())) return {offscreen: false};
    return Object.assign({offscreen: true}, await toOffscreen({op: 'status'}));
  },
};

chrome.runtime.onMessage.addListener((msg, _sender, reply) => {
  if (msg && msg.to === 'sw' && msg.op === 'ping') {
    reply({ok: true}); // the offscreen document's keep-alive
  }
  return false;
});

// Self-healing: if the offscreen document was closed and the worker went
// idle, the alarm wakes the worker, which recreates the document.
chrome.alarms.create('tabcast-keepalive', {periodInMinutes: 0.5});
chrome.alarms.onAlarm.addListener(() => { ensureOffscreen().catch(() => {}); });

ensureOffscreen().then(() => { self.tabcast.ready = true; },
  (e) => { self.tabcast.readyError = String(e); });
