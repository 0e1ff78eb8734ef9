// The header every panel page shares: who is logged in, their role, the
// Sessions and Admin links and Log out. Pages carry the markup; this fills it.
import { logout } from "./api.js";

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

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
