// Keyboard input from the sink (and the video): key_down and key_up,
// thinned auto-repeat, IME text, paste (the page's clipboard, then
// Ctrl+V) and copy-out (the page's copied text to this browser). The
// appliance owns what is held (core/dispatch); the panel remembers the
// keys it sent down, to send their key_up only, to lift them when focus
// leaves and to send heartbeats while one is down.

import { MOD_CTRL, modifiersOf } from "./wire.js";

const REPEAT_EVERY_MS = 150; // key auto-repeat is thinned to this

function isShortcut(ev, letter) {
  return (ev.ctrlKey || ev.metaKey) && !ev.altKey && (ev.code === `Key${letter.toUpperCase()}` || ev.key.toLowerCase() === letter);
}

export class Keys {
  // ui: the sink and the copy-out box; link: the InputLink; send(action):
  // a user's control input; focus(): back to the sink; setStatus(text).
  constructor(ui, { link, send, focus, setStatus }) {
    this.ui = ui;
    this.link = link;
    this.send = send;
    this.focus = focus;
    this.setStatus = setStatus;
    this.down = new Map(); // code (or key) → {key, code} sent down, not yet up
    this.lastRepeat = 0;
    this.keySent = false; // the last keydown went out as key_down (not as text)
    this.listen();
  }

  get holding() { return this.down.size > 0; }

  // reset forgets everything: a new peer, or none.
  reset() {
    this.down.clear();
    this.lastRepeat = 0;
    this.keySent = false;
  }

  // forget drops the held keys without lifting them: the producer ended
  // and the appliance released them on its side.
  forget() { this.down.clear(); }

  // releaseAll lifts every key sent down (focus left the page).
  releaseAll() {
    if (!this.link.active) return;
    for (const k of this.down.values()) this.link.sendControl({ kind: "key_up", key: k.key, code: k.code, modifiers: 0 });
    this.down.clear();
  }

  listen() {
    const { sink, video } = this.ui;
    for (const el of [sink, video]) {
      el.addEventListener("keydown", (ev) => this.keyDown(ev));
      el.addEventListener("keyup", (ev) => this.keyUp(ev));
      el.addEventListener("paste", (ev) => this.paste(ev));
      el.addEventListener("compositionend", (ev) => this.compositionEnd(ev));
    }
    // Nothing typed may accumulate in the sink outside a composition.
    // A key we sent as key_down types on the appliance: its keypress must
    // not also put text in the sink (synthetic keyboards send the text as a
    // separate char event that the keydown's preventDefault does not stop).
    sink.addEventListener("keypress", (ev) => {
      if (this.link.active && this.keySent) ev.preventDefault();
    });
    // Text that arrives without a key we sent (see keyDown) is inserted
    // as text.
    sink.addEventListener("input", (ev) => {
      if (ev.isComposing) return;
      if (this.link.ready && ev.inputType === "insertText" && ev.data) this.send({ kind: "text_insert", text: ev.data });
      sink.value = "";
    });
    this.ui.clipboardClose.addEventListener("click", () => {
      this.ui.clipboardOut.hidden = true;
      this.ui.clipboardText.value = "";
      this.focus();
    });
  }

  keyDown(ev) {
    if (!this.link.active) return;
    // IME: the keys go to the composition; compositionend sends the text.
    if (ev.isComposing || ev.keyCode === 229) return;
    // A key the browser cannot name (virtual keyboards, some layouts,
    // synthetic input) or a dead key: let its text reach the sink, whose
    // input event sends it as text_insert.
    if (ev.key === "Unidentified" || ev.key === "Dead") {
      this.keySent = false;
      return;
    }
    this.keySent = true;
    // Ctrl/Cmd+V: let the browser fire the paste event (handled below).
    if (isShortcut(ev, "v")) return;
    ev.preventDefault();
    if (!this.link.ready) return;
    const now = performance.now();
    if (ev.repeat) {
      if (now - this.lastRepeat < REPEAT_EVERY_MS) return;
      this.lastRepeat = now;
    }
    this.down.set(ev.code || ev.key, { key: ev.key, code: ev.code });
    const a = { kind: "key_down", key: ev.key, code: ev.code, modifiers: modifiersOf(ev) };
    if (ev.repeat) a.repeat = true;
    const done = this.send(a);
    if (!ev.repeat && (isShortcut(ev, "c") || isShortcut(ev, "x"))) this.copyOut(done);
  }

  keyUp(ev) {
    if (!this.link.active) return;
    const id = ev.code || ev.key;
    if (!this.down.has(id)) return; // never sent down (paste V, keys from before the focus)
    ev.preventDefault();
    this.down.delete(id);
    this.link.sendControl({ kind: "key_up", key: ev.key, code: ev.code, modifiers: modifiersOf(ev) });
  }

  // copyOut: the page's copied text comes back in the key's completed ack
  // (or, failing that, from clipboard_read) and goes to this browser's
  // clipboard when allowed, else into a box to copy by hand.
  async copyOut(keyDone) {
    const a = await keyDone;
    if (!a || a.status !== "completed") return;
    let text = a.result?.text;
    if (typeof text !== "string" || text === "") {
      const r = await this.link.sendControl({ kind: "clipboard_read" });
      if (!r || r.status !== "completed") return;
      text = r.result?.text;
    }
    if (typeof text !== "string" || text === "") return;
    try {
      await navigator.clipboard.writeText(text);
      this.setStatus("Copied from the page");
    } catch {
      this.ui.clipboardText.value = text;
      this.ui.clipboardOut.hidden = false;
      this.ui.clipboardText.select();
    }
  }

  paste(ev) {
    if (!this.link.active) return;
    ev.preventDefault();
    const text = ev.clipboardData?.getData("text/plain") ?? "";
    if (!this.link.ready || text === "") return;
    // The page's clipboard gets the text, then Ctrl+V pastes it there.
    this.send({ kind: "clipboard_write", text });
    const k = { key: "v", code: "KeyV", modifiers: MOD_CTRL };
    this.link.sendControl({ kind: "key_down", ...k });
    this.link.sendControl({ kind: "key_up", ...k });
  }

  compositionEnd(ev) {
    if (!this.link.active) return;
    const text = ev.data ?? "";
    this.ui.sink.value = "";
    if (this.link.ready && text !== "") this.send({ kind: "text_insert", text });
  }
}
