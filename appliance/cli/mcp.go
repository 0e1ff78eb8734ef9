package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/mcp"
)

// cmdMCP serves the agent tools over stdio (for an LLM client that starts
// `tabcast mcp`), through the local appliance's API with the agent token.
func cmdMCP(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var base, tokenFile string
	cfg, _, err := loadConfig("mcp", args, stderr, func(fs *pflag.FlagSet) {
		fs.StringVar(&base, "url", "", "appliance URL (default: from server.listen)")
		fs.StringVar(&tokenFile, "token-file", "", "API token file (default: auth.agentTokenFile)")
	})
	if err != nil {
		printConfigError(stderr, err)
		return exitUsage
	}
	c, err := newAPIClient(cfg, base, tokenFile)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast mcp:", err)
		return exitAuth
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mcp.StdioMain(ctx, apiBackend{c}, version, stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "tabcast mcp:", err)
		return exitError
	}
	return exitOK
}

// apiBackend implements the MCP tools over the appliance's HTTP API.
type apiBackend struct{ c *apiClient }

// do calls the API; a refusal comes back as an *errcode.Error with its code.
func (b apiBackend) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+b.c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.c.hc.Do(req)
	if err != nil {
		return errcode.New(errcode.BrowserUnavailable, "the appliance does not answer")
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error errcode.Error `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			return errcode.New(errcode.Internal, fmt.Sprintf("HTTP %d", resp.StatusCode))
		}
		return &e.Error
	}
	return json.Unmarshal(raw, out)
}

func (b apiBackend) ListSessions(ctx context.Context) ([]mcp.SessionInfo, error) {
	var out struct{ Sessions []mcp.SessionInfo }
	err := b.do(ctx, "GET", "/api/v1/sessions", nil, &out)
	return out.Sessions, err
}

func (b apiBackend) CreateSession(ctx context.Context, u string) (mcp.SessionInfo, error) {
	var out struct{ Session mcp.SessionInfo }
	err := b.do(ctx, "POST", "/api/v1/sessions", map[string]string{"url": u}, &out)
	return out.Session, err
}

func (b apiBackend) Agent(ctx context.Context, id string, req agent.Request) (*agent.Result, error) {
	var res agent.Result
	if err := b.do(ctx, "POST", "/api/v1/sessions/"+url.PathEscape(id)+"/agent", req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (b apiBackend) RequestHuman(ctx context.Context, id, reason string, timeout time.Duration) (mcp.HumanResult, error) {
	res, err := b.Agent(ctx, id, agent.Request{Command: "request_human", Reason: reason, TimeoutMs: int(timeout.Milliseconds())})
	if err != nil {
		return mcp.HumanResult{}, err
	}
	return mcp.HumanResultOf(res), nil
}
