package input

import (
	"context"
	"errors"
	"strings"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// keyParams is Input.dispatchKeyEvent's params.
type keyParams struct {
	Type                  string   `json:"type"`
	Modifiers             int      `json:"modifiers"`
	Text                  string   `json:"text,omitempty"`
	UnmodifiedText        string   `json:"unmodifiedText,omitempty"`
	Code                  string   `json:"code,omitempty"`
	Key                   string   `json:"key,omitempty"`
	WindowsVirtualKeyCode int      `json:"windowsVirtualKeyCode"`
	NativeVirtualKeyCode  int      `json:"nativeVirtualKeyCode"`
	AutoRepeat            bool     `json:"autoRepeat"`
	IsKeypad              bool     `json:"isKeypad"`
	Location              int      `json:"location,omitempty"`
	Commands              []string `json:"commands,omitempty"`
}

var dispatchKey = cdp.Command[keyParams, cdp.Empty]{Method: input.CommandDispatchKeyEvent}

func keyUpParams(ke keyEvent) keyParams {
	return keyParams{
		Type: "keyUp", Modifiers: ke.mods, Code: ke.code, Key: ke.key,
		WindowsVirtualKeyCode: ke.vk, NativeVirtualKeyCode: ke.vk, IsKeypad: ke.keypad, Location: ke.location,
	}
}

// shortcutLetter is the letter a Ctrl/Meta shortcut names: the typed
// character on any Latin layout, else the physical key (a Cyrillic layout
// still has Ctrl+C on KeyC).
func shortcutLetter(ke keyEvent) byte {
	if len(ke.key) == 1 {
		if b := ke.key[0] | 0x20; b >= 'a' && b <= 'z' {
			return b
		}
	}
	if len(ke.code) == 4 && strings.HasPrefix(ke.code, "Key") {
		return ke.code[3] | 0x20
	}
	return 0
}

// clipboardOp names the clipboard shortcut ke is: copy, cut, paste or "".
func clipboardOp(ke keyEvent) string {
	ctrl := ke.mods&(action.ModCtrl|action.ModMeta) != 0
	shift := ke.mods&action.ModShift != 0
	if ctrl && ke.mods&action.ModAlt == 0 {
		switch shortcutLetter(ke) {
		case 'c':
			return "copy"
		case 'x':
			return "cut"
		case 'v':
			return "paste"
		}
	}
	switch {
	case ke.vk == 45 && ctrl && !shift: // Ctrl+Insert
		return "copy"
	case ke.vk == 45 && shift && !ctrl: // Shift+Insert
		return "paste"
	case ke.vk == 46 && shift && !ctrl: // Shift+Delete
		return "cut"
	}
	return ""
}

// editCommands are the editing commands Chromium runs for a shortcut.
// Linux Chromium maps Ctrl+A/Z/Y itself, but not Cmd (Meta) ones from a
// Mac viewer; giving the command explicitly makes both work (it replaces
// the built-in binding, so nothing runs twice).
func editCommands(ke keyEvent) []string {
	if ke.mods&(action.ModCtrl|action.ModMeta) == 0 || ke.mods&action.ModAlt != 0 {
		return nil
	}
	shift := ke.mods&action.ModShift != 0
	switch shortcutLetter(ke) {
	case 'a':
		if !shift {
			return []string{"selectAll"}
		}
	case 'z':
		if shift {
			return []string{"redo"}
		}
		return []string{"undo"}
	case 'y':
		if !shift {
			return []string{"redo"}
		}
	}
	return nil
}

func (e *Executor) keyDown(ctx context.Context, a action.Action) (string, error) {
	_, p, op, err := e.keyDownParams(a)
	if err != nil {
		return "", err
	}
	if _, err := call(ctx, e, dispatchKey, p); err != nil {
		// A dialog opened by a keydown handler: the key got there.
		return "", pendingOK(err)
	}
	if op == "" {
		return "", nil
	}
	return e.clipboardKey(ctx, op)
}

// keyPress presses and releases a key as one action, the release sent
// right behind the press (as click does). A clipboard shortcut goes step
// by step: its copy or paste follows the key down's reply.
func (e *Executor) keyPress(ctx context.Context, a action.Action) (string, error) {
	cmds, op, err := e.keyPressCmds(a)
	if err != nil {
		return "", err
	}
	if op != "" {
		text, err := e.keyDown(ctx, a)
		return text, errors.Join(err, e.keyUp(ctx, a))
	}
	return "", pendingOK(e.guard(ctx, func(ctx context.Context) error { return e.sequence(ctx, cmds...) }))
}

// keyPressCmds are a key's down and up events, under the shortcut policy;
// op is the clipboard operation the key stands for, if any.
func (e *Executor) keyPressCmds(a action.Action) ([]pipeCmd, string, error) {
	ke, down, op, err := e.keyDownParams(a)
	if err != nil {
		return nil, "", err
	}
	return []pipeCmd{{dispatchKey.Method, down}, {dispatchKey.Method, keyUpParams(ke)}}, op, nil
}

// keyDownParams maps a key_down (or key press) to its CDP event, under
// the shortcut policy; op is the clipboard operation it stands for, if any.
func (e *Executor) keyDownParams(a action.Action) (keyEvent, keyParams, string, error) {
	ke, err := mapKey(a)
	if err != nil {
		return ke, keyParams{}, "", errcode.Newf(errcode.InvalidArgument, "%s", err.Error())
	}
	for _, sc := range e.pol.shortcuts {
		if sc.matches(ke.key, ke.code, ke.mods) {
			return ke, keyParams{}, "", errcode.Newf(errcode.ShortcutBlocked, "shortcut blocked by policy")
		}
	}
	op := clipboardOp(ke)
	if op != "" {
		// Without a virtual key code Chromium finds no Copy/Paste binding and
		// leaves its process-wide clipboard alone; clipboard.go plays the
		// page's own clipboard instead.
		ke.vk = 0
	}
	p := keyParams{
		Type: "rawKeyDown", Modifiers: ke.mods, Code: ke.code, Key: ke.key,
		WindowsVirtualKeyCode: ke.vk, NativeVirtualKeyCode: ke.vk,
		AutoRepeat: a.Repeat, IsKeypad: ke.keypad, Location: ke.location,
		Commands: editCommands(ke),
	}
	if ke.text != "" {
		p.Type, p.Text, p.UnmodifiedText = "keyDown", ke.text, ke.text
	}
	return ke, p, op, nil
}

// keyUp lifts a key. The dispatcher owns held input and sends a key_up
// only for a key that went down; the event is the key down's (a clipboard
// shortcut's has no virtual key code) with the modifiers of now.
func (e *Executor) keyUp(ctx context.Context, a action.Action) error {
	ke, err := mapKey(a)
	if err != nil {
		return errcode.Newf(errcode.InvalidArgument, "%s", err.Error())
	}
	if clipboardOp(ke) != "" {
		ke.vk = 0
	}
	_, err = call(ctx, e, dispatchKey, keyUpParams(ke))
	return pendingOK(err)
}

// replaceText selects all of the focused field and types a's text over the
// selection, or deletes it for no text: Ctrl+A's down and up and the text
// (or Backspace) go out back to back, as one action (see click).
func (e *Executor) replaceText(ctx context.Context, a action.Action) error {
	if len(a.Text) > e.pol.MaxText {
		return errcode.Newf(errcode.TooLarge, "text over %d bytes", e.pol.MaxText)
	}
	cmds, _, err := e.keyPressCmds(action.Action{Key: "a", Code: "KeyA", Modifiers: action.ModCtrl})
	if err != nil {
		return err
	}
	if a.Text != "" {
		cmds = append(cmds, pipeCmd{input.CommandInsertText, input.InsertTextParams{Text: a.Text}})
	} else {
		del, _, err := e.keyPressCmds(action.Action{Key: "Backspace", Code: "Backspace"})
		if err != nil {
			return err
		}
		cmds = append(cmds, del...)
	}
	return pendingOK(e.guard(ctx, func(ctx context.Context) error { return e.sequence(ctx, cmds...) }))
}

func (e *Executor) insertText(ctx context.Context, text string) error {
	if len(text) > e.pol.MaxText {
		return errcode.Newf(errcode.TooLarge, "text over %d bytes", e.pol.MaxText)
	}
	if text == "" {
		return nil
	}
	_, err := call(ctx, e, input.InsertText, input.InsertTextParams{Text: text})
	return pendingOK(err)
}
