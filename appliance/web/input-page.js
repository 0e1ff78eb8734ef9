// What the panel shows of the page the producer drives and what it does
// to it besides pointer and keys: the page state (URL, title, history,
// loading) from the state channel, JavaScript dialogs and their answers,
// and the navigation controls (back, forward, reload, the address bar).

export class PageView {
  // ui: the toolbar and dialog elements; send(action): a user's control
  // input; focus(): back to the sink; active(): a peer is there.
  constructor(ui, { send, focus, active }) {
    this.ui = ui;
    this.send = send;
    this.focus = focus;
    this.active = active;
    this.reset();
    this.listen();
  }

  // reset forgets the page: a new peer, or none.
  reset() {
    this.page = { url: "", title: "", canGoBack: false, canGoForward: false, loading: false };
    this.hideDialog();
  }

  // onState takes a state-channel message; it reports whether it knew it.
  onState(msg) {
    const ui = this.ui;
    switch (msg.type) {
      case "page_state":
        this.page = {
          url: String(msg.url ?? ""),
          title: String(msg.title ?? ""),
          canGoBack: !!msg.canGoBack,
          canGoForward: !!msg.canGoForward,
          loading: !!msg.loading,
        };
        if (document.activeElement !== ui.address) ui.address.value = this.page.url;
        if (this.page.title) ui.title.textContent = this.page.title;
        ui.url.textContent = this.page.url;
        return true;
      case "dialog_opened":
        this.showDialog(msg);
        return true;
      case "dialog_closed":
        this.hideDialog();
        return true;
    }
    return false;
  }

  // render enables the navigation controls while input is on.
  render(on) {
    const ui = this.ui;
    ui.back.disabled = !on || !this.page.canGoBack;
    ui.forward.disabled = !on || !this.page.canGoForward;
    ui.reload.disabled = !on;
    ui.reload.dataset.loading = String(this.page.loading);
    ui.address.disabled = !on;
  }

  // ---- dialogs ----

  showDialog(msg) {
    const ui = this.ui;
    const kind = String(msg.dialogType || "alert");
    this.dialog = { kind };
    ui.dialogKind.textContent = kind === "beforeunload" ? "Leave page?" : kind;
    ui.dialogMessage.textContent = String(msg.message ?? "");
    const prompt = kind === "prompt";
    ui.dialogPrompt.hidden = !prompt;
    ui.dialogPrompt.value = prompt ? String(msg.defaultPrompt ?? "") : "";
    ui.dialogDismiss.hidden = kind === "alert";
    ui.dialog.hidden = false;
    (prompt ? ui.dialogPrompt : ui.dialogAccept).focus({ preventScroll: true });
  }

  hideDialog() {
    this.ui.dialog.hidden = true;
    this.dialog = null;
  }

  answerDialog(accept) {
    if (!this.dialog) return;
    const a = { kind: "dialog_response", accept };
    if (accept && this.dialog.kind === "prompt") a.promptText = this.ui.dialogPrompt.value;
    this.hideDialog();
    this.send(a);
    this.focus();
  }

  listen() {
    const ui = this.ui;
    ui.dialogAccept.addEventListener("click", () => this.answerDialog(true));
    ui.dialogDismiss.addEventListener("click", () => this.answerDialog(false));
    ui.dialogPrompt.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") this.answerDialog(true);
      if (ev.key === "Escape") this.answerDialog(false);
    });
    ui.back.addEventListener("click", () => this.send({ kind: "back" }));
    ui.forward.addEventListener("click", () => this.send({ kind: "forward" }));
    ui.reload.addEventListener("click", () => this.send({ kind: "reload" }));
    ui.addressForm.addEventListener("submit", (ev) => {
      ev.preventDefault();
      let url = ui.address.value.trim();
      if (!url) return;
      // "example.com" means https://example.com; the appliance checks policy.
      if (!/^[a-z][a-z0-9+.-]*:/i.test(url)) url = `https://${url}`;
      this.send({ kind: "navigate", url });
      this.focus();
    });
    ui.address.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && this.active()) {
        ui.address.value = this.page.url;
        this.focus();
      }
    });
  }
}
