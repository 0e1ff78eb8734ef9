package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/errcode"
)

// sessionArg names the session of a browser tool call (the HTTP API has it
// in the path, the CLI as --session).
const sessionHelp = "Session id, from sessions_list or session_create."

// Inputs of the tools that are not agent commands.
type (
	listIn   struct{}
	createIn struct {
		URL string `json:"url,omitempty" jsonschema:"Page to open (http or https); empty for the default page."`
	}
)

const defaultHumanTimeout = 5 * time.Minute

// commandSchemas are built once from the agent's command table, so the
// SDK's schema cache (keyed by pointer) serves every server of the HTTP
// handler.
var commandSchemas = func() map[string]*jsonschema.Schema {
	out := map[string]*jsonschema.Schema{}
	for i := range agent.Table {
		if c := &agent.Table[i]; c.Tool != "" {
			out[c.Tool] = commandSchema(c)
		}
	}
	return out
}()

// commandSchema is the input schema of a command's tool: the session and
// the command's arguments, nothing else.
func commandSchema(c *agent.Command) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
		"session": {Type: "string", Description: sessionHelp},
	}, Required: []string{"session"}, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	for _, a := range c.AllArgs() {
		p := &jsonschema.Schema{Description: a.Help}
		switch a.Type {
		case agent.OptInt:
			p.Types = []string{"null", "integer"}
		case agent.OptNum:
			p.Types = []string{"null", "number"}
		case agent.Strings:
			p.Types = []string{"null", "array"}
			p.Items = &jsonschema.Schema{Type: "string"}
		default:
			p.Type = string(a.Type)
		}
		for _, v := range a.Enum {
			p.Enum = append(p.Enum, v)
		}
		s.Properties[a.Key] = p
		if a.Required {
			s.Required = append(s.Required, a.Key)
		}
	}
	return s
}

func add[In any](s *mcp.Server, t *mcp.Tool, h func(context.Context, In) *mcp.CallToolResult) {
	mcp.AddTool(s, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		return h(ctx, in), nil, nil
	})
}

func tool(name, title, desc string, readOnly bool) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: desc, Annotations: &mcp.ToolAnnotations{Title: title, ReadOnlyHint: readOnly}}
}

func addTools(s *mcp.Server, b Backend) {
	add(s, tool("sessions_list", "List sessions",
		"List the browser sessions you may drive: id, state, title and URL. Use an id as the session of the browser_* tools.", true),
		func(ctx context.Context, _ listIn) *mcp.CallToolResult {
			list, err := b.ListSessions(ctx)
			if err != nil {
				return errorResult(err)
			}
			if list == nil {
				list = []SessionInfo{}
			}
			return jsonResult(fmt.Sprintf("%d sessions", len(list)), map[string]any{"sessions": list})
		})
	add(s, tool("session_create", "Create a session",
		"Open a new browser session, optionally on a URL, and return its id. Prefer an existing session from sessions_list when one fits.", false),
		func(ctx context.Context, in createIn) *mcp.CallToolResult {
			si, err := b.CreateSession(ctx, in.URL)
			if err != nil {
				return errorResult(err)
			}
			return jsonResult("created session "+si.ID, si)
		})
	for i := range agent.Table {
		c := &agent.Table[i]
		if c.Tool == "" {
			continue
		}
		t := tool(c.Tool, c.Title, c.Help, c.ToolReadOnly)
		t.InputSchema = commandSchemas[c.Tool]
		h := func(ctx context.Context, in map[string]any) *mcp.CallToolResult { return command(ctx, b, c, in) }
		if c.Name == "request_human" {
			h = func(ctx context.Context, in map[string]any) *mcp.CallToolResult { return requestHuman(ctx, b, in) }
		}
		add(s, t, h)
	}
}

// command runs an agent command with the tool's input.
func command(ctx context.Context, b Backend, c *agent.Command, in map[string]any) *mcp.CallToolResult {
	sess, _ := in["session"].(string)
	if sess == "" {
		return errorResult(errcode.New(errcode.InvalidArgument, "session is required").WithHint("get one from sessions_list or session_create"))
	}
	m := map[string]any{"command": c.Name}
	for _, a := range c.AllArgs() {
		a.Set(m, in[a.Key])
	}
	r, err := agent.RequestOf(m)
	if err != nil {
		return errorResult(errcode.New(errcode.InvalidArgument, "arguments do not fit the command").WithHint("check the arguments against the tool's input schema"))
	}
	res, err := b.Agent(ctx, sess, r)
	if err != nil {
		return errorResult(err)
	}
	if res == nil {
		res = &agent.Result{OK: true, Command: r.Command}
	}
	return agentResult(r, res)
}

// requestHuman asks the backend for a person: it waits longer than a
// command and answers with how the request ended.
func requestHuman(ctx context.Context, b Backend, in map[string]any) *mcp.CallToolResult {
	sess, _ := in["session"].(string)
	reason, _ := in["reason"].(string)
	if sess == "" || strings.TrimSpace(reason) == "" {
		return errorResult(errcode.New(errcode.InvalidArgument, "session and reason are required"))
	}
	timeout := defaultHumanTimeout
	if ms, _ := in["timeoutMs"].(float64); ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	hr, err := b.RequestHuman(ctx, sess, reason, timeout)
	if err != nil {
		return errorResult(err)
	}
	return jsonResult("human: "+hr.Status, hr)
}

// errorResult reports err to the model: the stable code first, then the
// message and the hint.
func errorResult(err error) *mcp.CallToolResult {
	e := errcode.From(err)
	text := e.Code + ": " + e.Message
	if e.Hint != "" {
		text += " — hint: " + e.Hint
	}
	if e.Recoverable {
		text += " (recoverable)"
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// jsonResult is a short summary and the data as JSON.
func jsonResult(summary string, data any) *mcp.CallToolResult {
	js, err := json.Marshal(data)
	if err != nil {
		return errorResult(errcode.New(errcode.Internal, "unencodable result").WithRecoverable(false))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary + "\n" + string(js)}}}
}

// agentResult renders an agent command's result: the snapshot text, the
// screenshot image, or a summary line and the result as JSON.
func agentResult(r agent.Request, res *agent.Result) *mcp.CallToolResult {
	head := fmt.Sprintf("pageRevision: %d", res.PageRevision)
	if res.ActionRevision != 0 {
		head += fmt.Sprintf(", actionRevision: %d", res.ActionRevision)
	}
	if res.Duplicate {
		head += ", duplicate: this actionId was done before, nothing ran now"
	}
	switch r.Command {
	case "snapshot":
		if text, ok := field(res.Data, "text").(string); ok {
			out := head
			if res.Summary != "" {
				out += "\n" + res.Summary
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out + "\n\n" + text}}}
		}
	case "screenshot":
		b64, _ := field(res.Data, "base64").(string)
		mime, _ := field(res.Data, "mimeType").(string)
		if img, err := base64.StdEncoding.DecodeString(b64); err == nil && b64 != "" {
			if mime == "" {
				mime = "image/png"
			}
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.ImageContent{Data: img, MIMEType: mime},
				&mcp.TextContent{Text: head + "\n" + res.Summary},
			}}
		}
		return errorResult(errcode.New(errcode.Internal, "the screenshot came back without an image"))
	}
	summary := res.Summary
	if summary == "" {
		summary = r.Command + " done"
	}
	if !res.OK {
		summary = "not ok: " + summary
	}
	out := summary + "\n" + head
	if res.Data != nil {
		if js, err := json.Marshal(res.Data); err == nil {
			out += "\n" + string(js)
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}
}

// field reads key from data, a map or anything that encodes as a JSON
// object (the in-process and the remote Backend give different types).
func field(data any, key string) any {
	if m, ok := data.(map[string]any); ok {
		return m[key]
	}
	js, err := json.Marshal(data)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(js, &m) != nil {
		return nil
	}
	return m[key]
}
