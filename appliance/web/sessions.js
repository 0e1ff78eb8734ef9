// The session grid: every session the user may see, with a live
// thumbnail, its state, owner and viewers; create, close and invite for
// those allowed to. Everything from the API is shown with textContent.
import { api, apiBlob, whoami } from "./api.js";
import { mountHeader } from "./header.js";
import { $, el, setStatus } from "./dom.js";

const LIST_EVERY_MS = 3000;
const THUMB_EVERY_MS = 1500;
const VIEWPORTS = { "1280x720": [1280, 720], "1920x1080": [1920, 1080], "1024x768": [1024, 768] };

const ui = {
  grid: $("session-grid"),
  empty: $("sessions-empty"),
  count: $("sessions-count"),
  error: $("sessions-error"),
  newBtn: $("new-session"),
  newDialog: $("new-dialog"),
  newForm: $("new-form"),
  newURL: $("new-url"),
  newViewport: $("new-viewport"),
  newError: $("new-error"),
  newSubmit: $("new-submit"),
  newCancel: $("new-cancel"),
  closeDialog: $("close-dialog"),
  closeForm: $("close-form"),
  closeName: $("close-name"),
  closeError: $("close-error"),
  closeConfirm: $("close-confirm"),
  closeCancel: $("close-cancel"),
};

let me = null;
const cards = new Map(); // session id → card state
let closing = null; // the session the close dialog asks about
let listTimer = null;
let thumbTimer = null;

// Exposed for tests and for curious operators.
window.tabcast = { cards, sessions: [] };

function canControl() {
  return !!me && me.role !== "viewer" && (!Array.isArray(me.scopes) || me.scopes.includes("control"));
}

function canManage(s) {
  if (!canControl()) return false;
  if (me.role === "admin") return true;
  return me.role === "operator" && !!s.owner && s.owner === me.user;
}

function sessionHref(id) {
  return "/?session=" + encodeURIComponent(id);
}

const visibility = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
  for (const en of entries) {
    const c = cards.get(en.target.dataset.sessionId);
    if (c) c.visible = en.isIntersecting;
  }
}) : null;

function makeCard(s) {
  const href = sessionHref(s.id);
  const img = el("img", { testid: "card-thumb", alt: "", decoding: "async" });
  img.hidden = true;
  const note = el("span", { class: "thumb-note", testid: "card-thumb-note", text: "Loading picture…" });
  const badge = el("span", { class: "state-badge", testid: "card-state" });
  const thumb = el("a", { class: "thumb", href, testid: "card-open", "aria-label": "Open session" }, img, note, badge);
  const title = el("a", { class: "card-title", href, testid: "card-title" });
  const url = el("div", { class: "card-url", testid: "card-url" });
  const owner = el("span", { testid: "card-owner" });
  const viewers = el("span", { testid: "card-viewers" });
  const meta = el("div", { class: "card-meta" }, owner, el("span", { class: "dot", text: "·" }), viewers);
  const invited = el("div", { class: "card-invited", testid: "card-invited" });
  const inviteUser = el("input", { type: "text", name: "user", testid: "card-invite-user", placeholder: "User name", "aria-label": "User to invite", spellcheck: "false", autocomplete: "off", maxlength: "64" });
  const inviteSubmit = el("button", { type: "submit", class: "btn", testid: "card-invite-submit", text: "Invite to watch" });
  const inviteForm = el("form", { class: "invite-form", testid: "card-invite-form" }, inviteUser, inviteSubmit);
  const error = el("p", { class: "form-error", testid: "card-error", role: "alert" });
  const open = el("a", { class: "btn primary", href, testid: "card-open-btn", text: "Open" });
  const close = el("button", { type: "button", class: "btn danger", testid: "card-close", text: "Close" });
  const actions = el("div", { class: "card-actions" }, open, close);
  const body = el("div", { class: "card-body" }, title, url, meta, invited, inviteForm, error, actions);
  const card = el("article", { class: "card", testid: "session-card" }, thumb, body);
  card.dataset.sessionId = s.id;

  const c = { id: s.id, s, card, img, note, badge, title, url, owner, viewers, invited, inviteForm, inviteUser, inviteSubmit, error, close,
    visible: true, inflight: false, objectURL: "", modified: "", size: -1, updates: 0 };

  inviteForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const user = inviteUser.value.trim();
    error.textContent = "";
    if (!user) return;
    inviteSubmit.disabled = true;
    try {
      const out = await api("POST", `/api/v1/sessions/${encodeURIComponent(c.id)}/invites`, { user });
      inviteUser.value = "";
      if (out.session) updateCard(c, out.session);
      setStatus(`Invited ${user} to watch ${c.s.title || c.id}`);
    } catch (err) {
      error.textContent = err.message || String(err);
    } finally {
      inviteSubmit.disabled = false;
    }
  });
  close.addEventListener("click", () => askClose(c));
  img.addEventListener("error", () => { card.dataset.thumb = "error"; });
  visibility?.observe(card);
  return c;
}

function updateCard(c, s) {
  c.s = s;
  const manage = canManage(s);
  c.card.dataset.state = s.state;
  c.card.dataset.owner = s.owner || "";
  c.title.textContent = s.title || s.url || s.id;
  c.title.title = s.title || "";
  c.url.textContent = s.url || "";
  c.url.title = s.url || "";
  c.badge.textContent = s.state;
  c.badge.dataset.state = s.state;
  if (s.terminalReason) c.badge.title = s.terminalReason;
  c.owner.textContent = s.owner ? `Owner ${s.owner}` : "No owner";
  const v = s.viewers ?? 0;
  const p = s.producers ?? 0;
  c.viewers.textContent = `${v} viewer${v === 1 ? "" : "s"}${p ? ` · ${p} with input` : ""}`;
  c.viewers.dataset.count = String(v);

  const invited = Array.isArray(s.invited) ? s.invited : [];
  const key = invited.join("\n") + "|" + manage;
  if (c.invited.dataset.key !== key) {
    c.invited.dataset.key = key;
    c.invited.replaceChildren();
    if (invited.length) c.invited.append(el("span", { class: "muted", text: "Watching by invitation:" }));
    for (const u of invited) {
      const chip = el("span", { class: "chip", testid: "card-invitee" });
      chip.dataset.user = u;
      chip.append(el("span", { text: u }));
      if (manage) {
        const rm = el("button", { type: "button", class: "chip-x", testid: "card-uninvite", "aria-label": `Remove ${u}`, title: `Remove ${u}`, text: "×" });
        rm.addEventListener("click", () => uninvite(c, u));
        chip.append(rm);
      }
      c.invited.append(chip);
    }
  }
  c.inviteForm.hidden = !manage;
  c.close.hidden = !manage;
  const gone = s.state === "closed" || s.state === "failed" || s.state === "closing";
  c.close.disabled = gone;
  c.inviteSubmit.disabled = gone;
}

async function uninvite(c, user) {
  c.error.textContent = "";
  try {
    const out = await api("DELETE", `/api/v1/sessions/${encodeURIComponent(c.id)}/invites/${encodeURIComponent(user)}`);
    if (out.session) updateCard(c, out.session);
    setStatus(`${user} may no longer watch ${c.s.title || c.id}`);
  } catch (err) {
    c.error.textContent = err.message || String(err);
  }
}

function dropCard(c) {
  visibility?.unobserve(c.card);
  if (c.objectURL) URL.revokeObjectURL(c.objectURL);
  c.objectURL = "";
  c.card.remove();
  cards.delete(c.id);
}

function render(sessions) {
  window.tabcast.sessions = sessions;
  const seen = new Set();
  sessions.forEach((s, i) => {
    seen.add(s.id);
    let c = cards.get(s.id);
    if (!c) {
      c = makeCard(s);
      cards.set(s.id, c);
    }
    updateCard(c, s);
    // Keep the API's order without moving nodes that are already in place
    // (moving one would steal the focus of a half-typed invitation).
    if (ui.grid.children[i] !== c.card) ui.grid.insertBefore(c.card, ui.grid.children[i] || null);
  });
  for (const c of [...cards.values()]) if (!seen.has(c.id)) dropCard(c);
  ui.empty.hidden = sessions.length > 0;
  ui.count.textContent = `${sessions.length} session${sessions.length === 1 ? "" : "s"}`;
}

async function refreshList() {
  clearTimeout(listTimer);
  try {
    if (document.hidden && cards.size) return; // the visibilitychange refreshes
    const out = await api("GET", "/api/v1/sessions");
    render(Array.isArray(out.sessions) ? out.sessions : []);
    ui.error.textContent = "";
  } catch (err) {
    ui.error.textContent = `Could not list the sessions: ${err.message || err}`;
  } finally {
    listTimer = setTimeout(refreshList, LIST_EVERY_MS);
  }
}

// ---- live thumbnails ----

async function refreshThumb(c) {
  if (c.inflight) return;
  c.inflight = true;
  try {
    const { blob, modified } = await apiBlob(`/api/v1/sessions/${encodeURIComponent(c.id)}/thumbnail`);
    if (cards.get(c.id) !== c) return;
    if (c.objectURL && modified && modified === c.modified && blob.size === c.size) return; // the same picture
    const url = URL.createObjectURL(blob);
    // Decode off screen first, so the visible picture never blanks while
    // the next one loads.
    const next = new Image();
    next.src = url;
    try {
      await next.decode();
    } catch {
      URL.revokeObjectURL(url);
      return;
    }
    if (cards.get(c.id) !== c) {
      URL.revokeObjectURL(url);
      return;
    }
    const old = c.objectURL;
    c.objectURL = url;
    c.modified = modified;
    c.size = blob.size;
    c.img.src = url;
    if (old) URL.revokeObjectURL(old);
    c.updates++;
    c.card.dataset.thumb = "loaded";
    c.card.dataset.thumbUpdates = String(c.updates);
    c.img.hidden = false;
    c.note.hidden = true;
  } catch (err) {
    if (err.status === 404 && !c.objectURL) {
      // A session captures only while someone watches it.
      c.note.textContent = c.s.state === "ready" ? "No picture yet" : c.s.state;
      c.note.hidden = false;
    }
  } finally {
    c.inflight = false;
  }
}

function thumbTick() {
  clearTimeout(thumbTimer);
  if (!document.hidden) {
    for (const c of cards.values()) {
      if (!c.visible) continue;
      if (c.s.state === "closed" || c.s.state === "failed") continue;
      refreshThumb(c);
    }
  }
  thumbTimer = setTimeout(thumbTick, THUMB_EVERY_MS);
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) {
    thumbTick();
    refreshList();
  }
});

// ---- new session ----

ui.newBtn.addEventListener("click", () => {
  ui.newError.textContent = "";
  ui.newSubmit.disabled = false;
  ui.newSubmit.textContent = "Start";
  ui.newDialog.showModal();
  ui.newURL.focus();
});
ui.newCancel.addEventListener("click", () => ui.newDialog.close());

ui.newForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  ui.newError.textContent = "";
  const [width, height] = VIEWPORTS[ui.newViewport.value] || VIEWPORTS["1280x720"];
  const body = { width, height };
  const url = ui.newURL.value.trim();
  if (url) body.url = url;
  ui.newSubmit.disabled = true;
  ui.newSubmit.textContent = "Starting…";
  try {
    const out = await api("POST", "/api/v1/sessions", body);
    ui.newDialog.close();
    ui.newURL.value = "";
    setStatus(`Started session ${out.session?.title || out.session?.id || ""}`.trim());
    await refreshList();
  } catch (err) {
    ui.newError.textContent = err.message || String(err);
  } finally {
    ui.newSubmit.disabled = false;
    ui.newSubmit.textContent = "Start";
  }
});

// ---- close ----

function askClose(c) {
  closing = c;
  ui.closeName.textContent = c.s.title || c.s.url || c.id;
  ui.closeError.textContent = "";
  ui.closeConfirm.disabled = false;
  ui.closeDialog.showModal();
}
ui.closeCancel.addEventListener("click", () => ui.closeDialog.close());
ui.closeForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const c = closing;
  if (!c) return;
  ui.closeConfirm.disabled = true;
  try {
    await api("DELETE", `/api/v1/sessions/${encodeURIComponent(c.id)}`);
    ui.closeDialog.close();
    setStatus(`Closed ${c.s.title || c.id}`);
    await refreshList();
  } catch (err) {
    ui.closeError.textContent = err.message || String(err);
  } finally {
    ui.closeConfirm.disabled = false;
  }
});

async function main() {
  me = await whoami();
  window.tabcast.me = { user: me.user, role: me.role };
  mountHeader(me);
  ui.newBtn.hidden = !canControl();
  await refreshList();
  thumbTick();
}

main().catch((err) => setStatus(String(err.message || err), true));
