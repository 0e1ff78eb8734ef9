// SessionView shows what the session snapshot says besides the picture:
// title and URL, its state and a recovery it made, who watches it (with
// every viewer's transport), its tabs, an agent's request for a person and
// the take / release control button. The snapshot comes pushed over
// signaling, or polled over HTTP while the socket is down (app.js).

import { api } from "./api.js";
import { $ } from "./dom.js";

export class SessionView {
  // ui: the page's elements; tabcast: the test/operator object (reads
  // session and peerId, writes snapshot); setStatus(text, isError).
  constructor(ui, tabcast, setStatus) {
    this.ui = ui;
    this.tabcast = tabcast;
    this.setStatus = setStatus;
    this.recoveryShown = undefined; // the last recovery's time, once one snapshot was shown
    this.tabsKey = ""; // what the tab list was fetched for
    this.pendingHuman = null; // the agent's request shown in the banner
    this.controlHeld = false; // somebody holds exclusive control
    this.handoff = {
      banner: $("human-banner"), reason: $("human-reason"), done: $("human-done"), control: $("take-control"),
    };
    this.listen();
  }

  // showSession shows a session from the list (or the API).
  showSession(s) {
    this.tabcast.session = s.id;
    this.showTitle(s);
    this.showSnapshot(s);
  }

  showTitle(s) {
    this.ui.title.textContent = s.title || s.id;
    this.ui.url.textContent = s.url || "";
    document.title = `${s.title || s.id} · Tabcast`;
  }

  // update shows a fresher snapshot of the session shown; title and URL
  // only when it has them (the page state may know better).
  update(s, retitle) {
    if (!s || s.id !== this.tabcast.session) return;
    if (s.title) this.ui.title.textContent = s.title;
    if (s.url) this.ui.url.textContent = s.url;
    if (retitle) document.title = `${s.title || s.id} · Tabcast`;
    this.showSnapshot(s);
  }

  // gone says the session no longer exists.
  gone() {
    const st = this.ui.sessionState;
    st.textContent = "gone";
    st.dataset.state = "closed";
    st.hidden = false;
  }

  // showSnapshot shows the snapshot's state and who watches it (viewers;
  // producers are those with input).
  showSnapshot(s) {
    const ui = this.ui;
    this.tabcast.snapshot = {
      id: s.id, state: s.state, title: s.title, url: s.url, owner: s.owner || "",
      viewers: s.viewers ?? 0, producers: s.producers ?? 0, invited: Array.isArray(s.invited) ? [...s.invited] : [],
    };
    // recovering (a crashed page or browser coming back) shows like any
    // state; a page left crashed shows while the session is ready.
    const label = s.state === "ready" && s.pageError ? `page ${s.pageError.replace(/_/g, " ")}` : s.state || "";
    ui.sessionState.textContent = label;
    ui.sessionState.dataset.state = s.state || "";
    ui.sessionState.hidden = !label || label === "ready";
    ui.sessionState.title = s.terminalReason || s.recovering || s.pageError || "";
    this.showRecovery(s.lastRecovery);
    const v = s.viewers ?? 0;
    const p = s.producers ?? 0;
    // Connected agents (CDP clients) are listed by name beside the count.
    const agents = Array.isArray(s.agents) ? s.agents : [];
    ui.viewers.textContent = `${v} watching${p ? ` · ${p} with input` : " · nobody with input"}` +
      (agents.length ? ` · agents: ${agents.join(", ")}` : "");
    ui.viewers.dataset.agents = agents.join(",");
    ui.viewers.dataset.viewers = String(v);
    ui.viewers.dataset.producers = String(p);
    ui.viewers.hidden = false;
    this.showViewerTable(s.viewerDetails);
    this.showHandoff(s);
    this.showTabs(s);
  }

  // showRecovery says once that the session came back from a crash: a
  // renderer is back in well under a second, too soon for the state
  // recovering to show.
  showRecovery(r) {
    const at = r?.at || "";
    if (this.recoveryShown !== undefined && at && at !== this.recoveryShown) {
      const what = { renderer_crashed: "page crash", renderer_hung: "hung page", browser_crashed: "browser crash" }[r.reason] || "crash";
      this.setStatus(`Recovered from a ${what} in ${(r.tookMs / 1000).toFixed(1)} s`);
    }
    this.recoveryShown = at;
  }

  // showTabs lists the session's tabs (a popup the page opened, or an
  // agent's tabs new) when there is more than one; picking one switches the
  // session to it, as an agent's tabs switch does. The list is fetched
  // again only when the snapshot's tab count, page or title changed.
  async showTabs(s) {
    const ui = this.ui;
    const n = s.tabs ?? 1;
    const key = `${s.id}|${n}|${s.pageRevision ?? ""}|${s.url || ""}|${s.title || ""}`;
    if (key === this.tabsKey) return;
    this.tabsKey = key;
    if (n < 2) {
      ui.tabs.hidden = true;
      ui.tabs.replaceChildren();
      return;
    }
    try {
      const r = await api("POST", `/api/v1/sessions/${encodeURIComponent(s.id)}/agent`, { command: "tabs" });
      if (this.tabsKey !== key) return; // a newer snapshot is being shown
      const tabs = Array.isArray(r.data?.tabs) ? r.data.tabs : [];
      ui.tabs.replaceChildren(...tabs.map((t) => {
        const o = document.createElement("option");
        o.value = t.id;
        o.textContent = (t.title || t.url || `tab ${t.index + 1}`).slice(0, 60);
        o.selected = !!t.current;
        return o;
      }));
      ui.tabs.hidden = tabs.length < 2;
    } catch (err) {
      ui.tabs.hidden = true; // no right to list them (e.g. watch-only)
      this.tabcast.errors.push(`tabs: ${err.message || err}`);
    }
  }

  // showViewerTable lists every viewer's transport from the snapshot: path
  // (relay or direct, udp or tcp), RTT and loss from its receiver reports,
  // and the appliance's bandwidth estimate for it.
  showViewerTable(list) {
    const table = $("viewer-table");
    const rows = Array.isArray(list) ? list : [];
    table.hidden = rows.length === 0;
    table.tBodies[0].replaceChildren(...rows.map((v) => {
      const tr = document.createElement("tr");
      tr.dataset.testid = "viewer-row";
      tr.dataset.path = v.path || "";
      const cell = (text, poor) => {
        const td = document.createElement("td");
        td.textContent = text;
        if (poor) td.dataset.poor = "true";
        return td;
      };
      const who = (v.user || "viewer") + (v.interactive ? " ✎" : "") + (v.peer === this.tabcast.peerId ? " (you)" : "");
      const path = v.path ? `${v.path}/${v.protocol || "udp"}` : "connecting";
      const rtt = v.rttMs > 0 ? `${Math.round(v.rttMs)} ms` : "–";
      const loss = `${(v.lossPct || 0).toFixed(1)} %`;
      const rate = v.estimateKbps >= 1000 ? `${(v.estimateKbps / 1000).toFixed(1)} Mb/s` : `${v.estimateKbps || 0} kb/s`;
      tr.append(cell(who), cell(path), cell(rtt, v.rttMs > 150), cell(loss, v.lossPct > 2), cell(rate, v.estimateKbps > 0 && v.estimateKbps < 1000));
      return tr;
    }));
  }

  // Hand-off: an agent's request for a person (banner + Done), and the
  // take / release button of a session with exclusive control.
  showHandoff(s) {
    const ui = this.handoff;
    const reqs = Array.isArray(s.humanRequests) ? s.humanRequests : [];
    this.pendingHuman = reqs.length ? reqs[0] : null;
    ui.banner.hidden = !this.pendingHuman;
    if (this.pendingHuman) ui.reason.textContent = this.pendingHuman.reason; // text, never HTML
    const ctl = s.control || {};
    ui.control.hidden = ctl.policy !== "exclusive";
    this.controlHeld = !!ctl.holder;
    ui.control.textContent = this.controlHeld ? `Release control (${ctl.holder})` : "Take control";
    ui.control.dataset.holder = ctl.holder || "";
    this.tabcast.snapshot.control = { policy: ctl.policy || "shared", holder: ctl.holder || "" };
    this.tabcast.snapshot.humanRequests = reqs.map((r) => ({ id: r.id, reason: r.reason }));
  }

  listen() {
    const tabcast = this.tabcast;
    const hand = this.handoff;
    this.ui.tabs.addEventListener("change", async () => {
      const id = tabcast.session;
      if (!id) return;
      try {
        await api("POST", `/api/v1/sessions/${encodeURIComponent(id)}/agent`, { command: "tabs", op: "switch", tabId: this.ui.tabs.value });
      } catch (err) {
        tabcast.errors.push(`tabs switch: ${err.message || err}`);
      }
      this.tabsKey = ""; // list them again with the next snapshot
    });
    hand.done.addEventListener("click", async () => {
      if (!this.pendingHuman || !tabcast.session) return;
      hand.done.disabled = true;
      try {
        await api("POST", `/api/v1/sessions/${encodeURIComponent(tabcast.session)}/human/${encodeURIComponent(this.pendingHuman.id)}/done`);
        hand.banner.hidden = true;
      } catch (err) {
        this.setStatus(String(err.message || err), true);
      } finally {
        hand.done.disabled = false;
      }
    });
    hand.control.addEventListener("click", async () => {
      if (!tabcast.session) return;
      try {
        const out = await api("POST", `/api/v1/sessions/${encodeURIComponent(tabcast.session)}/control`, { action: this.controlHeld ? "release" : "take" });
        if (out.session) this.showSnapshot(out.session);
      } catch (err) {
        this.setStatus(String(err.message || err), true);
      }
    });
  }
}
