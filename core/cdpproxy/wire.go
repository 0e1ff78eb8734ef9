package cdpproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/chromedp/cdproto"
	"github.com/tabcast/tabcast/core/errcode"
)

// CDP's JSON-RPC error codes.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeNotAllowed     = -32601 // Chromium's "method not found": a client treats both alike
	codeInvalidParams  = -32602
	codeServer         = -32000
)

// WebSocket close codes the proxy uses.
const (
	closeNormal    = 1000
	closeGoingAway = 1001
	closePolicy    = 1008
	closeTooBig    = 1009
	closeInternal  = 1011
)

// message is one client command.
type message struct {
	ID        int64           `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

// cdpError is an error answer; Message always starts with the method and
// carries the stable code ("Browser.close: not_allowed: …").
type cdpError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func refusal(method, why string) *cdpError {
	return &cdpError{Code: codeNotAllowed, Message: fmt.Sprintf("%s: %s: %s", safeMethod(method), errcode.NotAllowed, why)}
}

func invalidParams(method, why string) *cdpError {
	return &cdpError{Code: codeInvalidParams, Message: fmt.Sprintf("%s: %s: %s", safeMethod(method), errcode.InvalidArgument, why)}
}

// fromErr turns an appliance error (an *errcode.Error keeps its code) or
// Chromium's own protocol error into an answer.
func fromErr(method string, err error) *cdpError {
	var pe *cdproto.Error
	if errors.As(err, &pe) {
		return &cdpError{Code: pe.Code, Message: pe.Message}
	}
	e := errcode.From(err)
	code := int64(codeServer)
	if e.Code == errcode.NotAllowed {
		code = codeNotAllowed
	}
	return &cdpError{Code: code, Message: fmt.Sprintf("%s: %s: %s", safeMethod(method), e.Code, e.Message)}
}

// safeMethod is a method name fit to echo: bounded, printable ASCII.
func safeMethod(m string) string {
	if len(m) > maxMethodLen {
		m = m[:maxMethodLen]
	}
	b := []byte(m)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '?'
		}
	}
	return string(b)
}

// reply is one answer to the client.
type reply struct {
	ID        int64           `json:"id"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *cdpError       `json:"error,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

// event is one event to the client.
type event struct {
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

var emptyResult = json.RawMessage(`{}`)

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only raw results from Chromium could fail, and they are JSON.
		b, _ = json.Marshal(reply{Error: &cdpError{Code: codeServer, Message: "internal: could not encode an answer"}})
	}
	return b
}

// resultMessage is a result answer, put together without re-encoding the
// result Chromium sent: a screenshot's is copied once, into the message.
func resultMessage(id int64, result json.RawMessage, sessionID string) []byte {
	if len(result) == 0 {
		result = emptyResult
	}
	b := make([]byte, 0, len(result)+len(sessionID)+48)
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	if sessionID != "" {
		b = append(b, `,"sessionId":`...)
		q, _ := json.Marshal(sessionID) // a string always encodes
		b = append(b, q...)
	}
	return append(b, '}')
}

// parse reads one client message; a message that is not a command gets a
// CDP error with the id it had (0 when none could be read).
func parse(raw []byte) (*message, *cdpError) {
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		var probe struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(raw, &probe)
		m.ID = probe.ID
		return &m, &cdpError{Code: codeParse, Message: "message must be a JSON object with an integer id, a method, params and an optional sessionId"}
	}
	if m.Method == "" {
		return &m, &cdpError{Code: codeInvalidRequest, Message: "message has no method"}
	}
	if len(m.Params) > 0 && (m.Params[0] != '{') && string(m.Params) != "null" {
		return &m, invalidParams(m.Method, "params must be an object")
	}
	if string(m.Params) == "null" {
		m.Params = nil
	}
	return &m, nil
}
