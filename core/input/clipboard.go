package input

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/errcode"
)

// The page's clipboard.
//
// Chromium keeps one clipboard (and one PRIMARY selection) for the whole
// process, shared by every session's pages. Letting a page use it would
// paste one session's text into another. So each Executor keeps its page's
// clipboard itself: clipboard_write and Ctrl+C/X fill it, Ctrl+V pastes it.
// The key events still reach the page (without the virtual key code that
// would make Chromium run its own Copy/Paste), followed by a copy, cut or
// paste ClipboardEvent carrying a DataTransfer, so page handlers can read
// and replace the data or cancel; when they do not cancel, the default
// action is done here (selection read, execCommand('delete'),
// Input.insertText). The events are not isTrusted.

// pageJS finds the focused element (through open shadow roots and
// same-origin frames) and its selected text; password fields never give
// their text.
const pageJS = `
function tcFocused() {
  let doc = document, el = doc.activeElement;
  for (let i = 0; i < 32 && el; i++) {
    if (el.shadowRoot && el.shadowRoot.activeElement) { el = el.shadowRoot.activeElement; continue; }
    if (el.tagName === 'IFRAME' || el.tagName === 'FRAME') {
      let d = null;
      try { d = el.contentDocument; } catch (x) {}
      if (d && d.activeElement) { doc = d; el = d.activeElement; continue; }
    }
    break;
  }
  return [el, doc];
}
function tcIsField(el) {
  return !!el && (el.tagName === 'TEXTAREA' || el.tagName === 'INPUT');
}
function tcSelected(el, doc) {
  if (tcIsField(el)) {
    if (el.type === 'password') return '';
    let s = null, e = null;
    try { s = el.selectionStart; e = el.selectionEnd; } catch (x) {}
    if (s == null || e == null || e <= s) return '';
    return String(el.value).substring(s, e);
  }
  const sel = doc.getSelection ? doc.getSelection() : null;
  return sel ? String(sel) : '';
}
function tcEditable(el) {
  if (!el) return false;
  if (tcIsField(el)) return !el.readOnly && !el.disabled && el.type !== 'password';
  return !!el.isContentEditable;
}
function tcFire(type, el, doc, dt) {
  const target = el || doc.body || doc.documentElement;
  return target.dispatchEvent(new ClipboardEvent(type, {clipboardData: dt, bubbles: true, cancelable: true, composed: true}));
}
`

// copyJS fires copy or cut and returns the copied text ({big: true} past
// max UTF-16 units, which is at most as many bytes).
const copyJS = `(function (cut, max) {` + pageJS + `
  const [el, doc] = tcFocused();
  const sel = tcSelected(el, doc);
  const dt = new DataTransfer();
  let text;
  if (!tcFire(cut ? 'cut' : 'copy', el, doc, dt)) {
    text = dt.getData('text/plain');
  } else {
    text = sel;
    if (cut && text !== '' && tcEditable(el)) doc.execCommand('delete');
  }
  if (text.length > max) return {big: true};
  return {text: text};
})(%t, %d)`

// pasteJS fires paste and reports whether the page let the default happen.
const pasteJS = `(function (text) {` + pageJS + `
  const [el, doc] = tcFocused();
  const dt = new DataTransfer();
  dt.setData('text/plain', text);
  return tcFire('paste', el, doc, dt);
})(%s)`

// selectionJS reads the selection for clipboard_read.
const selectionJS = `(function (max) {` + pageJS + `
  const [el, doc] = tcFocused();
  const text = tcSelected(el, doc);
  if (text.length > max) return {big: true};
  return {text: text};
})(%d)`

type copied struct {
	Text string `json:"text"`
	Big  bool   `json:"big"`
}

// eval runs expr in the page's main world as a user gesture and decodes its
// JSON value.
func (e *Executor) eval(ctx context.Context, expr string, out any) error {
	res, err := call(ctx, e, runtime.Evaluate, runtime.EvaluateParams{
		Expression: expr, ReturnByValue: ptr(true), UserGesture: ptr(true), AwaitPromise: ptr(false),
	})
	if err != nil {
		return err
	}
	if res.ExceptionDetails != nil {
		// The page's own script threw (or replaced what we call); the
		// exception text may quote page data, so it is not kept.
		return fmt.Errorf("page script threw")
	}
	if res.Result == nil || len(res.Result.Value) == 0 {
		return fmt.Errorf("page script returned no value")
	}
	if err := json.Unmarshal(res.Result.Value, out); err != nil {
		return fmt.Errorf("decode page script result: %w", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// clipboardKey completes Ctrl+C/X/V after their key down went out.
func (e *Executor) clipboardKey(ctx context.Context, op string) (string, error) {
	switch op {
	case "copy", "cut":
		var c copied
		if err := e.eval(ctx, fmt.Sprintf(copyJS, op == "cut", e.pol.MaxClipboard), &c); err != nil {
			return "", pendingOK(err)
		}
		if c.Big || len(c.Text) > e.pol.MaxClipboard {
			return "", errcode.Newf(errcode.TooLarge, "copied text over %d bytes", e.pol.MaxClipboard)
		}
		e.clip = c.Text
		// The producer that pressed the keys gets the text (copy-out).
		return c.Text, nil
	case "paste":
		lit, err := json.Marshal(e.clip)
		if err != nil {
			return "", fmt.Errorf("encode clipboard: %w", err)
		}
		var doDefault bool
		if err := e.eval(ctx, fmt.Sprintf(pasteJS, lit), &doDefault); err != nil {
			return "", pendingOK(err)
		}
		if doDefault && e.clip != "" {
			_, err := call(ctx, e, input.InsertText, input.InsertTextParams{Text: e.clip})
			return "", pendingOK(err)
		}
	}
	return "", nil
}

func (e *Executor) clipboardWrite(text string) error {
	if len(text) > e.pol.MaxClipboard {
		return errcode.Newf(errcode.TooLarge, "clipboard over %d bytes", e.pol.MaxClipboard)
	}
	e.clip = text
	return nil
}

func (e *Executor) clipboardRead(ctx context.Context) (string, error) {
	var c copied
	if err := e.eval(ctx, fmt.Sprintf(selectionJS, e.pol.MaxClipboard), &c); err != nil {
		return "", err
	}
	if c.Big || len(c.Text) > e.pol.MaxClipboard {
		return "", errcode.Newf(errcode.TooLarge, "selection over %d bytes", e.pol.MaxClipboard)
	}
	return c.Text, nil
}
