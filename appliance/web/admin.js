// The admin page: plugin health and encoder capabilities from /status, API
// tokens (the secret is shown once) and the audit log. Admins only; the API
// refuses everyone else anyway. Everything is shown with textContent.
import { api, whoami } from "./api.js";
import { mountHeader } from "./header.js";
import { $, setStatus } from "./dom.js";

const STATUS_EVERY_MS = 5000;

const tbody = (id) => $(id).querySelector("tbody");

// pick reads a field whatever its JSON spelling (name, Name).
function pick(o, name) {
  if (!o || typeof o !== "object") return undefined;
  if (name in o) return o[name];
  const cap = name[0].toUpperCase() + name.slice(1);
  if (cap in o) return o[cap];
  const low = name.toLowerCase();
  for (const k of Object.keys(o)) if (k.toLowerCase() === low) return o[k];
  return undefined;
}

function show(v) {
  if (v === undefined || v === null || v === "") return "–";
  if (Array.isArray(v)) return v.length ? v.join(", ") : "–";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function when(v) {
  if (!v) return "–";
  const d = new Date(v);
  if (Number.isNaN(d.getTime()) || d.getFullYear() < 2000) return "–";
  return d.toLocaleString();
}

function row(cells, props = {}) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(props)) tr.dataset[k] = v;
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.append(c);
    else td.textContent = show(c);
    tr.append(td);
  }
  return tr;
}

function badge(text, state) {
  const b = document.createElement("span");
  b.className = "state-badge";
  b.dataset.state = state;
  b.textContent = text;
  return b;
}

// extras lists the fields of a plugin status the table has no column for
// (the status grows; whatever is there is shown).
const SHOWN = new Set(["name", "kind", "state", "restarts", "generation", "version", "pid", "since", "lasterror", "info"]);
function extras(p) {
  const out = [];
  for (const [k, v] of Object.entries(p || {})) {
    if (SHOWN.has(k.toLowerCase()) || v === null || v === "" || (typeof v === "object" && !Array.isArray(v))) continue;
    out.push(`${k}: ${show(v)}`);
  }
  const info = pick(p, "info");
  if (info && typeof info === "object") {
    for (const [k, v] of Object.entries(info)) {
      if (["name", "kind", "version"].includes(k.toLowerCase()) || v === null || v === "") continue;
      if (v && typeof v === "object" && !Array.isArray(v)) {
        for (const [ck, cv] of Object.entries(v)) out.push(`${ck}: ${show(cv)}`);
      } else {
        out.push(`${k}: ${show(v)}`);
      }
    }
  }
  return out.join("; ");
}

// ---- health ----

async function loadStatus() {
  try {
    const out = await api("GET", "/api/v1/status");
    const st = out.status || {};
    $("app-version").textContent = show(pick(st, "version"));
    $("chromium-version").textContent = show(pick(st, "browser"));
    $("codecs").textContent = show(pick(st, "codecs"));
    // The tab-capture probe: which path new sessions take, and why.
    const cap = pick(st, "capture") || {};
    let capText = "screencast (cdp)";
    if (pick(cap, "ok")) capText = `tab capture (probe: first frame in ${Math.round((pick(cap, "firstFrameNs") || 0) / 1e6)} ms)`;
    else if (pick(cap, "tried")) capText = `screencast (tab capture probe failed: ${show(pick(cap, "reason"))})`;
    const fb = pick(cap, "fallbacks") || 0;
    if (fb) capText += `, ${fb} session(s) fell back`;
    $("capture-mode").textContent = `${capText}; video.capture ${show(pick(cap, "mode"))}`;
    const proc = pick(st, "process") || {};
    $("goroutines").textContent = show(pick(proc, "goroutines"));
    $("open-files").textContent = show(pick(proc, "openFiles"));
    const plugins = pick(st, "plugins") || [];
    tbody("plugin-table").replaceChildren(...plugins.map((p) => {
      const name = show(pick(p, "name"));
      const state = show(pick(p, "state"));
      const info = pick(p, "info") || {};
      const version = pick(p, "version") ?? pick(info, "version");
      const err = pick(p, "lastError");
      return row([name, pick(p, "kind") ?? pick(info, "kind"), badge(state, state), pick(p, "restarts"), pick(p, "generation"), version, pick(p, "pid"), when(pick(p, "since")), err, extras(p)],
        { testid: "plugin-row", name, state });
    }));
    const probes = pick(st, "encoderProbes") || [];
    tbody("probe-table").replaceChildren(...probes.map((p) => {
      const ok = !!pick(p, "ok");
      const ms = pick(p, "durationMs") ?? pick(p, "duration_ms");
      let dur = pick(p, "duration");
      if (ms !== undefined) dur = `${ms} ms`;
      else if (typeof dur === "number") dur = `${Math.round(dur / 1e6)} ms`; // a Go Duration in ns
      return row([pick(p, "encoder"), pick(p, "codec"), !!pick(p, "hardware"), badge(ok ? "ok" : "failed", ok ? "ready" : "failed"), dur, pick(p, "error")],
        { testid: "probe-row", encoder: show(pick(p, "encoder")) });
    }));
    $("status-error").textContent = "";
  } catch (err) {
    $("status-error").textContent = `Status: ${err.message || err}`;
  }
}

// ---- tokens ----

async function loadTokens() {
  try {
    const out = await api("GET", "/api/v1/tokens");
    const tokens = Array.isArray(out.tokens) ? out.tokens : [];
    tbody("token-table").replaceChildren(...tokens.map((t) => {
      const id = show(pick(t, "id"));
      const revoke = document.createElement("button");
      revoke.type = "button";
      revoke.className = "btn danger small";
      revoke.dataset.testid = "token-revoke";
      revoke.textContent = "Revoke";
      revoke.addEventListener("click", () => revokeToken(id, revoke));
      return row([id, pick(t, "name"), pick(t, "user"), pick(t, "role"), pick(t, "scopes"), when(pick(t, "created")), pick(t, "expires") ? when(pick(t, "expires")) : "never", revoke],
        { testid: "token-row", id });
    }));
    $("token-error").textContent = "";
  } catch (err) {
    $("token-error").textContent = `Tokens: ${err.message || err}`;
  }
}

async function revokeToken(id, btn) {
  if (btn.dataset.armed !== "1") {
    // A second click confirms: no blocking confirm() dialog.
    btn.dataset.armed = "1";
    btn.textContent = "Really revoke?";
    setTimeout(() => { if (btn.isConnected) { btn.dataset.armed = ""; btn.textContent = "Revoke"; } }, 4000);
    return;
  }
  btn.disabled = true;
  try {
    await api("DELETE", `/api/v1/tokens/${encodeURIComponent(id)}`);
    setStatus(`Revoked token ${id}`);
  } catch (err) {
    $("token-error").textContent = err.message || String(err);
  }
  await loadTokens();
  loadAudit();
}

$("token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("token-error").textContent = "";
  const scopes = ["read", "control", "admin", "cdp"].filter((s) => $(`token-scope-${s}`).checked);
  const body = {
    name: $("token-name").value.trim(),
    user: $("token-user").value.trim(),
    role: $("token-role").value,
    scopes,
    ttl: $("token-ttl").value,
  };
  const btn = $("token-create");
  btn.disabled = true;
  try {
    const out = await api("POST", "/api/v1/tokens", body);
    $("token-secret").value = out.token || "";
    $("token-secret-box").hidden = false;
    $("token-secret").focus();
    $("token-secret").select();
    $("token-name").value = "";
    setStatus(`Created token ${pick(out.info, "id") || ""}`.trim());
    await loadTokens();
    loadAudit();
  } catch (err) {
    $("token-error").textContent = err.message || String(err);
  } finally {
    btn.disabled = false;
  }
});

$("token-copy").addEventListener("click", async () => {
  const f = $("token-secret");
  f.select();
  try {
    await navigator.clipboard.writeText(f.value);
    setStatus("Token copied to the clipboard");
  } catch {
    setStatus("Select the token and copy it yourself (the browser refused the clipboard)", true);
  }
});

$("token-secret-done").addEventListener("click", () => {
  $("token-secret").value = "";
  $("token-secret-box").hidden = true;
});

// ---- audit ----

async function loadAudit() {
  try {
    const out = await api("GET", "/api/v1/audit?limit=200");
    const recs = (Array.isArray(out.records) ? out.records : []).slice();
    const t = (r) => Date.parse(pick(r, "time")) || 0;
    recs.sort((a, b) => t(b) - t(a));
    tbody("audit-table").replaceChildren(...recs.map((r) => row(
      [when(pick(r, "time")), pick(r, "action"), pick(r, "user"), pick(r, "session"), pick(r, "outcome"), pick(r, "code"), pick(r, "source"), pick(r, "detail")],
      { testid: "audit-row", action: show(pick(r, "action")) })));
    $("audit-error").textContent = "";
  } catch (err) {
    $("audit-error").textContent = `Audit log: ${err.message || err}`;
  }
}
$("audit-refresh").addEventListener("click", loadAudit);

async function main() {
  const me = await whoami();
  mountHeader(me);
  if (me.role !== "admin") {
    $("admin-denied").hidden = false;
    return;
  }
  $("admin-content").hidden = false;
  await Promise.all([loadStatus(), loadTokens(), loadAudit()]);
  setInterval(() => { if (!document.hidden) loadStatus(); }, STATUS_EVERY_MS);
}

main().catch((err) => setStatus(String(err.message || err), true));
