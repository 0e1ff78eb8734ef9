// The header every panel page shares, written once here: the brand, the
// Sessions and Admin links, and who is logged in with their role and Log
// out. A page's <header class="bar"> holds only what is its own (the
// session view's title, state and connection); renderHeader puts the
// shared parts around it when the module loads, and mountHeader fills in
// the user. Built with DOM calls: the CSP (script-src 'self') allows that.
import { logout } from "./api.js";
import { $, el } from "./dom.js";

// renderHeader writes the shared parts into the page's header, once. The
// session view's Sessions link is a way back (data-back on the header).
function renderHeader() {
  const bar = document.querySelector("header.bar");
  if (!bar || bar.dataset.rendered) return;
  bar.dataset.rendered = "1";
  const ownParts = bar.children.length > 0;
  const back = "back" in bar.dataset;
  const sessions = el("a", { href: "/sessions.html", testid: "link-sessions", text: back ? "\u2190 Sessions" : "Sessions" });
  if (back) sessions.title = "All sessions";
  const admin = el("a", { href: "/admin.html", testid: "link-admin", text: "Admin" });
  admin.hidden = true;
  const brand = el("div", { class: "brand", "aria-label": "Tabcast" }, el("span", { class: "brand-mark" }), "Tabcast");
  const nav = el("nav", { class: "nav-links", "aria-label": "Panel" }, sessions, admin);
  const who = el("div", { class: "who" },
    el("span", { class: "user-name", testid: "user-name" }),
    el("span", { class: "role-badge", testid: "user-role" }),
    el("button", { type: "button", class: "btn", testid: "logout", text: "Log out" }));
  bar.prepend(brand, nav);
  if (!ownParts) bar.append(el("div", { class: "spacer" })); // pushes "who" to the right
  bar.append(who);
}

renderHeader();

export function mountHeader(me) {
  const name = $("user-name");
  const role = $("user-role");
  if (name) name.textContent = me.user || "";
  if (role) {
    role.textContent = me.role || "";
    role.dataset.role = me.role || "";
  }
  const admin = $("link-admin");
  if (admin) admin.hidden = me.role !== "admin";
  const out = $("logout");
  if (out && !out.dataset.bound) {
    out.dataset.bound = "1";
    out.addEventListener("click", () => { out.disabled = true; logout(); });
  }
  const here = location.pathname;
  for (const a of document.querySelectorAll(".nav-links a")) {
    a.classList.toggle("current", a.getAttribute("href") === here);
  }
}
