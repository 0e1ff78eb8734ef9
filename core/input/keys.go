package input

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tabcast/tabcast/core/action"
)

// codeVK maps DOM KeyboardEvent.code (US layout positions) to Windows
// virtual key codes, which Chromium uses for keyCode and for its editing
// key bindings.
var codeVK = map[string]int{
	"Backspace": 8, "Tab": 9, "Enter": 13, "NumpadEnter": 13,
	"ShiftLeft": 16, "ShiftRight": 16, "ControlLeft": 17, "ControlRight": 17,
	"AltLeft": 18, "AltRight": 18, "Pause": 19, "CapsLock": 20, "Escape": 27,
	"Space": 32, "PageUp": 33, "PageDown": 34, "End": 35, "Home": 36,
	"ArrowLeft": 37, "ArrowUp": 38, "ArrowRight": 39, "ArrowDown": 40,
	"PrintScreen": 44, "Insert": 45, "Delete": 46,
	"MetaLeft": 91, "MetaRight": 92, "OSLeft": 91, "OSRight": 92, "ContextMenu": 93,
	"NumpadMultiply": 106, "NumpadAdd": 107, "NumpadSubtract": 109, "NumpadDecimal": 110, "NumpadDivide": 111,
	"NumLock": 144, "ScrollLock": 145,
	"Semicolon": 186, "Equal": 187, "Comma": 188, "Minus": 189, "Period": 190, "Slash": 191,
	"Backquote": 192, "BracketLeft": 219, "Backslash": 220, "BracketRight": 221, "Quote": 222,
	"IntlBackslash": 226,
}

// keyVK maps named DOM keys to virtual key codes, for events that carry a
// key but no code (agents).
var keyVK = map[string]int{
	"Backspace": 8, "Tab": 9, "Enter": 13, "Shift": 16, "Control": 17, "Alt": 18,
	"Pause": 19, "CapsLock": 20, "Escape": 27, " ": 32, "PageUp": 33, "PageDown": 34,
	"End": 35, "Home": 36, "ArrowLeft": 37, "ArrowUp": 38, "ArrowRight": 39, "ArrowDown": 40,
	"PrintScreen": 44, "Insert": 45, "Delete": 46, "Meta": 91, "ContextMenu": 93,
	"NumLock": 144, "ScrollLock": 145,
}

// punctVK maps US-layout printable ASCII punctuation (shifted or not) to
// the virtual key of the key that types it.
var punctVK = map[rune]int{
	';': 186, ':': 186, '=': 187, '+': 187, ',': 188, '<': 188, '-': 189, '_': 189,
	'.': 190, '>': 190, '/': 191, '?': 191, '`': 192, '~': 192, '[': 219, '{': 219,
	'\\': 220, '|': 220, ']': 221, '}': 221, '\'': 222, '"': 222,
	'!': 49, '@': 50, '#': 51, '$': 52, '%': 53, '^': 54, '&': 55, '*': 56, '(': 57, ')': 48,
	' ': 32,
}

func init() {
	for c := 'A'; c <= 'Z'; c++ {
		codeVK["Key"+string(c)] = int(c)
	}
	for d := 0; d <= 9; d++ {
		codeVK["Digit"+strconv.Itoa(d)] = 48 + d
		codeVK["Numpad"+strconv.Itoa(d)] = 96 + d
	}
	for f := 1; f <= 24; f++ {
		codeVK["F"+strconv.Itoa(f)] = 111 + f
		keyVK["F"+strconv.Itoa(f)] = 111 + f
	}
}

// isNamedKey reports a DOM key value that names a key ("Enter", "F5",
// "ArrowLeft", "Dead") rather than the character it types.
func isNamedKey(k string) bool {
	if utf8.RuneCountInString(k) < 2 {
		return false
	}
	for i := 0; i < len(k); i++ {
		b := k[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9') {
			return false
		}
	}
	return k[0] >= 'A' && k[0] <= 'Z'
}

// keyEvent is what dispatchKeyEvent needs, derived from an action.
type keyEvent struct {
	key, code string
	vk        int
	text      string // typed text for keyDown; "" makes a rawKeyDown
	location  int
	keypad    bool
	mods      int
}

const maxKeyLen = 32

// mapKey derives the CDP key event for a key_down/key_up action.
func mapKey(a action.Action) (keyEvent, error) {
	if a.Key == "" && a.Code == "" {
		return keyEvent{}, errors.New("key or code required")
	}
	if len(a.Key) > maxKeyLen || len(a.Code) > maxKeyLen || !utf8.ValidString(a.Key) || !utf8.ValidString(a.Code) {
		return keyEvent{}, errors.New("key or code too long or not UTF-8")
	}
	for _, r := range a.Key {
		// Control characters would be typed as such; keys name them instead.
		if r < 0x20 || r == 0x7f {
			return keyEvent{}, errors.New("control character in key")
		}
	}
	ke := keyEvent{key: a.Key, code: a.Code, mods: a.Modifiers & (action.ModAlt | action.ModCtrl | action.ModMeta | action.ModShift)}
	if ke.key == "" {
		ke.key = keyForCode(a.Code, ke.mods&action.ModShift != 0)
	}
	ke.vk = virtualKey(ke.key, ke.code)

	switch {
	case strings.HasSuffix(ke.code, "Left") && ke.code != "ArrowLeft" && ke.code != "BracketLeft":
		ke.location = 1
	case strings.HasSuffix(ke.code, "Right") && ke.code != "ArrowRight" && ke.code != "BracketRight":
		ke.location = 2
	case strings.HasPrefix(ke.code, "Numpad"):
		ke.location, ke.keypad = 3, true
	}

	ctrl := ke.mods&(action.ModCtrl|action.ModMeta) != 0
	altGr := ke.mods&action.ModCtrl != 0 && ke.mods&action.ModAlt != 0 && ke.mods&action.ModMeta == 0
	switch {
	case ke.key == "Enter":
		ke.text = "\r"
	case isNamedKey(ke.key) || ke.key == "":
		// Tab, arrows, F-keys, Dead, Process…: no text.
	case !ctrl:
		ke.text = ke.key
	case altGr && !isASCIIAlnum(ke.key):
		// Ctrl+Alt is AltGr on Windows layouts: "@" on a German keyboard.
		ke.text = ke.key
	}
	if ke.key == "Enter" && ctrl {
		ke.text = ""
	}
	return ke, nil
}

func isASCIIAlnum(k string) bool {
	if len(k) != 1 {
		return false
	}
	b := k[0]
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// virtualKey picks the Windows virtual key code: letters and digits by the
// character (as browsers do for keyCode on any layout), then the physical
// code, then named keys and US punctuation; 0 when unknown (e.g. "é"
// without a code).
func virtualKey(key, code string) int {
	if len(key) == 1 {
		b := key[0]
		switch {
		case b >= 'a' && b <= 'z':
			return int(b - 'a' + 'A')
		case b >= 'A' && b <= 'Z':
			return int(b)
		case b >= '0' && b <= '9' && !strings.HasPrefix(code, "Numpad"):
			return int(b)
		}
	}
	if strings.HasPrefix(code, "Numpad") && !(len(key) == 1 && key[0] >= '0' && key[0] <= '9') {
		// NumLock off: the keypad types navigation keys.
		if vk, ok := keyVK[key]; ok {
			return vk
		}
	}
	if vk, ok := codeVK[code]; ok {
		return vk
	}
	if vk, ok := keyVK[key]; ok {
		return vk
	}
	if r, n := utf8.DecodeRuneInString(key); n == len(key) && n > 0 {
		if vk, ok := punctVK[r]; ok {
			return vk
		}
	}
	return 0
}

// keyForCode names the key of a code-only action (US layout).
func keyForCode(code string, shift bool) string {
	switch {
	case len(code) == 4 && strings.HasPrefix(code, "Key"):
		if shift {
			return code[3:]
		}
		return strings.ToLower(code[3:])
	case len(code) == 6 && strings.HasPrefix(code, "Digit") && !shift:
		return code[5:]
	case code == "Space":
		return " "
	case code == "NumpadEnter":
		return "Enter"
	}
	if _, ok := keyVK[code]; ok {
		return code
	}
	if strings.HasPrefix(code, "Arrow") || code == "Escape" || code == "Backspace" || code == "Tab" || code == "Enter" {
		return code
	}
	return ""
}

// shortcut is one parsed BlockedShortcuts rule.
type shortcut struct {
	mods int    // action.ModCtrl (Ctrl or Meta), ModAlt, ModShift
	key  string // lowercase key value, or a named key
	code string
}

func parseShortcut(s string) (shortcut, error) {
	parts := strings.Split(strings.TrimSpace(s), "+")
	if len(parts) == 0 || strings.TrimSpace(parts[len(parts)-1]) == "" {
		// "Ctrl++" names the plus key.
		if strings.HasSuffix(s, "++") {
			parts = append(parts[:len(parts)-2], "+")
		} else {
			return shortcut{}, errors.New("no key")
		}
	}
	var sc shortcut
	for _, m := range parts[:len(parts)-1] {
		switch strings.ToLower(strings.TrimSpace(m)) {
		case "ctrl", "control", "cmd", "command", "meta", "super", "win":
			sc.mods |= action.ModCtrl
		case "alt", "option", "opt":
			sc.mods |= action.ModAlt
		case "shift":
			sc.mods |= action.ModShift
		default:
			return shortcut{}, errors.New("unknown modifier " + strconv.Quote(m))
		}
	}
	k := strings.TrimSpace(parts[len(parts)-1])
	if utf8.RuneCountInString(k) == 1 {
		sc.key = strings.ToLower(k)
		b := sc.key[0]
		switch {
		case len(sc.key) == 1 && b >= 'a' && b <= 'z':
			sc.code = "Key" + strings.ToUpper(sc.key)
		case len(sc.key) == 1 && b >= '0' && b <= '9':
			sc.code = "Digit" + sc.key
		}
		return sc, nil
	}
	aliases := map[string]string{
		"esc": "Escape", "escape": "Escape", "del": "Delete", "delete": "Delete", "ins": "Insert",
		"insert": "Insert", "enter": "Enter", "return": "Enter", "tab": "Tab", "backspace": "Backspace",
		"space": " ", "home": "Home", "end": "End", "pageup": "PageUp", "pagedown": "PageDown",
		"up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
		"arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
		"plus": "+", "minus": "-",
	}
	lk := strings.ToLower(k)
	if v, ok := aliases[lk]; ok {
		sc.key = strings.ToLower(v)
		if v == " " {
			sc.code = "Space"
		} else if _, ok := codeVK[v]; ok {
			sc.code = v
		}
		return sc, nil
	}
	if len(lk) >= 2 && lk[0] == 'f' {
		if n, err := strconv.Atoi(lk[1:]); err == nil && n >= 1 && n <= 24 {
			sc.key, sc.code = lk, "F"+strconv.Itoa(n)
			return sc, nil
		}
	}
	for code := range codeVK {
		if strings.EqualFold(code, k) {
			sc.code = code
			return sc, nil
		}
	}
	return shortcut{}, errors.New("unknown key " + strconv.Quote(k))
}

// matches reports whether the key action is this shortcut: every modifier
// of the rule is held (Meta counts as Ctrl) and the key or the code is the
// rule's.
func (sc shortcut) matches(key, code string, mods int) bool {
	held := mods & (action.ModAlt | action.ModShift)
	if mods&(action.ModCtrl|action.ModMeta) != 0 {
		held |= action.ModCtrl
	}
	if held&sc.mods != sc.mods {
		return false
	}
	return sc.key != "" && strings.ToLower(key) == sc.key || sc.code != "" && code == sc.code
}
