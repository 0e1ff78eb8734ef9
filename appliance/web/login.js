// Login and the forced password change. The password never leaves this
// page except in the POST to the appliance.
import { api, APIError } from "./api.js";
import { $ } from "./dom.js";
const params = new URLSearchParams(location.search);

// Only a path on this appliance may follow the login (no open redirect).
function nextURL() {
  const n = params.get("next") || "/sessions.html";
  return n.startsWith("/") && !n.startsWith("//") ? n : "/sessions.html";
}

function showError(err) {
  let text = err instanceof APIError ? err.message : "The appliance did not answer.";
  if (err?.code === "rate_limited") text = "Too many failed attempts. Wait a moment and try again.";
  $("login-error").textContent = text;
}

function showChange(oldPassword) {
  $("login-form").hidden = true;
  $("change-form").hidden = false;
  if (oldPassword) $("change-old").value = oldPassword;
  $("change-new").focus();
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("login-error").textContent = "";
  const password = $("login-password").value;
  try {
    const res = await fetch("/api/v1/auth/login", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ username: $("login-user").value, password }),
    });
    const body = await res.json().catch(() => null);
    if (!res.ok || !body?.ok) throw new APIError(res.status, body);
    if (body.mustChangePassword) return showChange(password);
    location.assign(nextURL());
  } catch (err) {
    showError(err);
  }
});

$("change-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("login-error").textContent = "";
  try {
    await api("POST", "/api/v1/auth/password", { oldPassword: $("change-old").value, newPassword: $("change-new").value });
    location.assign(nextURL());
  } catch (err) {
    showError(err);
  }
});

if (params.get("change") === "1") showChange("");
