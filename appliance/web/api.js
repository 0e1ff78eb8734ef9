// The panel's one way to call the appliance's API: same-origin cookie
// login, the CSRF token on every state change, and a trip to the login
// page when the login is gone.

let me = null;

export class APIError extends Error {
  constructor(status, body) {
    const e = body?.error || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || "http_" + status;
    this.hint = e.hint || "";
  }
}

function toLogin() {
  const next = location.pathname + location.search;
  location.assign("/login.html?next=" + encodeURIComponent(next));
}

// whoami returns the logged-in user (cached), or sends the browser to the
// login page (the returned promise then never settles).
export async function whoami(refresh = false) {
  if (me && !refresh) return me;
  const res = await fetch("/api/v1/auth/me", { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (res.status === 401) {
    toLogin();
    return new Promise(() => {});
  }
  const body = await res.json().catch(() => null);
  if (!res.ok || !body?.ok) throw new APIError(res.status, body);
  me = body;
  if (me.mustChangePassword && !location.pathname.endsWith("/login.html")) {
    location.assign("/login.html?change=1&next=" + encodeURIComponent(location.pathname + location.search));
    return new Promise(() => {});
  }
  return me;
}

// api calls path with an optional JSON body and returns the parsed answer;
// a refusal throws APIError (401 goes to the login page).
export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD") {
    const u = await whoami();
    if (u.csrf) headers["X-CSRF-Token"] = u.csrf;
  }
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const out = await res.json().catch(() => null);
  if (res.status === 401 && !path.startsWith("/api/v1/auth/")) {
    toLogin();
    return new Promise(() => {});
  }
  if (!res.ok || !out?.ok) throw new APIError(res.status, out);
  return out;
}

// apiBlob fetches a binary resource of the API (a thumbnail) and returns
// {blob, modified}; a refusal throws APIError (401 goes to the login page).
export async function apiBlob(path) {
  const res = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (res.status === 401) {
    toLogin();
    return new Promise(() => {});
  }
  if (!res.ok) {
    const out = await res.json().catch(() => null);
    throw new APIError(res.status, out);
  }
  return { blob: await res.blob(), modified: res.headers.get("Last-Modified") || "" };
}

export async function logout() {
  try { await api("POST", "/api/v1/auth/logout"); } finally { me = null; location.assign("/login.html"); }
}
