package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/session"
)

// browserUsage is the help of tabcast browser; the commands' synopses come
// from the agent's command table.
var browserUsage = func() string {
	var b strings.Builder
	b.WriteString(`usage: tabcast browser COMMAND [ARGS] [--session ID] [--json] [--url URL] [--token-file F] [config flags]

Drive a session as an agent, through the appliance's API (the same
dispatcher as the people in the panel). Refs come from snapshot: @e3.

  sessions                          list the sessions you may see
  cdp-url [SESSION]                 print a single-use CDP URL (60 s) for a
                                    client that takes only a URL (needs
                                    agent.cdp and a token with the cdp scope)
`)
	for _, c := range agent.Table {
		for _, line := range strings.Split(c.Usage, "\n") {
			if line != "" {
				b.WriteString("  " + line + "\n")
			}
		}
		if c.Name == "upload" {
			b.WriteString("  uploads                            list the session's upload area\n")
		}
	}
	b.WriteString(`
Exit codes: 0 ok, 1 other error, 2 usage, 3 not allowed (401/403),
4 not found, 5 stale ref or conflict (409), 6 timed out, 7 busy or
unavailable (429/503).
`)
	return b.String()
}()

// Exit codes of tabcast browser, by error class.
const (
	exitOK = iota
	exitError
	exitUsage
	exitAuth
	exitNotFound
	exitConflict
	exitTimeout
	exitUnavailable
)

// browserFlags are the flags of tabcast browser itself; the commands'
// flags are declared from the agent's command table (addCommandFlags) and
// read from fs.
type browserFlags struct {
	session, url, tokenFile, timeout string
	asJSON                           bool
	fs                               *pflag.FlagSet
}

// cmdBrowser is the agent CLI: one API call per invocation.
func cmdBrowser(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, browserUsage)
		return exitUsage
	}
	cmd := strings.ToLower(args[0])
	var f browserFlags
	cfg, fs, err := loadBrowserConfig(args[1:], stderr, &f)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast browser:", err)
		return exitUsage
	}
	pos := fs.Args()
	c, err := newAPIClient(cfg, f.url, f.tokenFile)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast browser:", err)
		return exitAuth
	}
	if cmd == "sessions" {
		var out struct {
			Sessions []struct{ ID, State, Title, URL, Owner string }
		}
		if code := c.call("GET", "/api/v1/sessions", nil, &out, stderr); code != exitOK {
			return code
		}
		if f.asJSON {
			_ = json.NewEncoder(stdout).Encode(out.Sessions)
			return exitOK
		}
		for _, s := range out.Sessions {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", s.ID, s.State, s.Title, s.URL)
		}
		return exitOK
	}
	if cmd == "cdp-url" {
		return cdpURL(c, pos, &f, stdout, stderr)
	}
	req, err := browserRequest(cmd, pos, &f)
	if err != nil && cmd != "uploads" {
		fmt.Fprintln(stderr, "tabcast browser:", err)
		return exitUsage
	}
	if f.session == "" {
		if f.session, err = c.firstSession(); err != nil {
			fmt.Fprintln(stderr, "tabcast browser:", err)
			return exitNotFound
		}
	}
	if cmd == "uploads" {
		var out struct {
			Uploads []struct {
				Name string
				Size int64
			}
		}
		if code := c.call("GET", "/api/v1/sessions/"+url.PathEscape(f.session)+"/uploads", nil, &out, stderr); code != exitOK {
			return code
		}
		for _, u := range out.Uploads {
			fmt.Fprintf(stdout, "%s\t%d\n", u.Name, u.Size)
		}
		return exitOK
	}
	if cmd == "upload" {
		// Local files go to the upload area first, under their base name.
		files, _ := req["files"].([]string)
		for i, name := range files {
			if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() {
				if code := c.putFile(f.session, name, stderr); code != exitOK {
					return code
				}
				files[i] = filepath.Base(name)
			}
		}
	}
	var res struct {
		OK             bool            `json:"ok"`
		Summary        string          `json:"summary"`
		ActionRevision uint64          `json:"actionRevision"`
		PageRevision   uint64          `json:"pageRevision"`
		Data           json.RawMessage `json:"data"`
	}
	var raw json.RawMessage
	if code := c.call("POST", "/api/v1/sessions/"+url.PathEscape(f.session)+"/agent", req, &raw, stderr); code != exitOK {
		return code
	}
	_ = json.Unmarshal(raw, &res)
	if f.asJSON {
		fmt.Fprintln(stdout, string(raw))
	} else {
		printBrowserResult(stdout, cmd, res.Summary, res.Data)
	}
	if cmd == "screenshot" {
		var d struct{ Base64 string }
		_ = json.Unmarshal(res.Data, &d)
		b, err := base64.StdEncoding.DecodeString(d.Base64)
		if err != nil || len(pos) == 0 {
			fmt.Fprintln(stderr, "tabcast browser: screenshot: bad image data")
			return exitError
		}
		if err := os.WriteFile(pos[0], b, 0o644); err != nil {
			fmt.Fprintln(stderr, "tabcast browser:", err)
			return exitError
		}
	}
	if !res.OK { // a wait that ran out
		return exitTimeout
	}
	return exitOK
}

// cdpURL prints a ticket URL of the session's CDP endpoint (POST
// …/cdp/ticket): what browser-use's cdp_url and other clients that take
// only a URL connect with. The URL is a secret for 60 s, used once.
func cdpURL(c *apiClient, pos []string, f *browserFlags, stdout, stderr io.Writer) int {
	id := f.session
	if len(pos) > 1 || (len(pos) == 1 && id != "" && pos[0] != id) {
		fmt.Fprintln(stderr, "tabcast browser: cdp-url takes one session, as SESSION or --session")
		return exitUsage
	}
	if len(pos) == 1 {
		id = pos[0]
	}
	if id == "" {
		var err error
		if id, err = c.firstSession(); err != nil {
			fmt.Fprintln(stderr, "tabcast browser:", err)
			return exitNotFound
		}
	}
	var out struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if code := c.call("POST", "/api/v1/sessions/"+url.PathEscape(id)+"/cdp/ticket", nil, &out, stderr); code != exitOK {
		return code
	}
	if f.asJSON {
		_ = json.NewEncoder(stdout).Encode(out)
		return exitOK
	}
	fmt.Fprintln(stdout, out.URL)
	return exitOK
}

func loadBrowserConfig(args []string, stderr io.Writer, f *browserFlags) (*config.Config, *pflag.FlagSet, error) {
	fs := pflag.NewFlagSet("browser", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	config.AddFlags(fs)
	fs.StringVar(&f.session, "session", "", "session id (default: the first you may see)")
	fs.StringVar(&f.url, "url", "", "appliance URL (default: from server.listen)")
	fs.StringVar(&f.tokenFile, "token-file", "", "API token file (default: auth.agentTokenFile)")
	fs.BoolVar(&f.asJSON, "json", false, "print the raw JSON result")
	fs.StringVar(&f.timeout, "timeout", "", "how long the command may take, e.g. 10s")
	addCommandFlags(fs)
	f.fs = fs
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	file, _ := fs.GetString("config")
	cfg, err := config.Load(config.Options{Defaults: defaultConfig, File: file, Environ: os.Environ(), Flags: fs})
	return cfg, fs, err
}

// addCommandFlags declares each flag of the agent command table once
// (several commands share --selector, --name, --reveal).
func addCommandFlags(fs *pflag.FlagSet) {
	type flag struct {
		a    agent.Arg
		help string
	}
	var order []string
	flags := map[string]*flag{}
	for _, c := range agent.Table {
		for _, a := range c.Args {
			names := []string{a.Flag}
			if a.FlagPerValue {
				names = a.Enum
			}
			for _, n := range names {
				if n == "" {
					continue
				}
				fl := flags[n]
				if fl == nil {
					fl = &flag{a: a}
					flags[n] = fl
					order = append(order, n)
				}
				if a.FlagPerValue {
					fl.help = c.Name + ": " + a.Key + " " + n
				} else if fl.help == "" {
					fl.help = a.FlagHelp
				}
			}
		}
	}
	for _, n := range order {
		fl := flags[n]
		switch {
		case fl.a.FlagPerValue || fl.a.Type == agent.Bool:
			fs.BoolP(n, fl.a.Short, false, fl.help)
		case fl.a.Type == agent.Int:
			fs.IntP(n, fl.a.Short, 0, fl.help)
		case fl.a.Type == agent.Number:
			fs.Float64P(n, fl.a.Short, 0, fl.help)
		default:
			fs.StringP(n, fl.a.Short, fl.a.FlagDefault, fl.help)
		}
	}
}

// flagArgs puts the values of the command's flags into req.
func flagArgs(c *agent.Command, fs *pflag.FlagSet, req map[string]any) {
	for _, a := range c.Args {
		switch {
		case a.FlagPerValue:
			for _, v := range a.Enum {
				if on, _ := fs.GetBool(v); on {
					a.Set(req, v)
				}
			}
		case a.Flag == "":
		case a.Type == agent.Bool:
			v, _ := fs.GetBool(a.Flag)
			a.Set(req, v)
		case a.Type == agent.Int:
			if v, _ := fs.GetInt(a.Flag); v > 0 {
				a.Set(req, v)
			}
		case a.Type == agent.Number:
			v, _ := fs.GetFloat64(a.Flag)
			a.Set(req, v)
		default:
			v, _ := fs.GetString(a.Flag)
			if a.Key == "ref" {
				v = strings.TrimPrefix(v, "@")
			}
			a.Set(req, v)
		}
	}
}

// browserRequest builds the agent request of a command line: the flags
// as the command table says, the positional arguments as each command's
// synopsis says.
func browserRequest(cmd string, pos []string, f *browserFlags) (map[string]any, error) {
	if cmd == "uploads" {
		return nil, errors.New("uploads is a listing")
	}
	c, ok := agent.Lookup(cmd)
	if !ok || c.Usage == "" {
		return nil, fmt.Errorf("unknown command %q (see tabcast browser --help)", cmd)
	}
	req := map[string]any{"command": c.Name}
	if f.timeout != "" {
		d, err := time.ParseDuration(f.timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--timeout %q: want a duration like 10s", f.timeout)
		}
		req["timeoutMs"] = d.Milliseconds()
	}
	// A leading @eN (or eN) is the target ref.
	if len(pos) > 0 && isRef(pos[0]) && cmd != "navigate" {
		req["ref"] = strings.TrimPrefix(pos[0], "@")
		pos = pos[1:]
	}
	if f.fs != nil {
		flagArgs(c, f.fs, req)
	}
	need := func(n int, what string) error {
		if len(pos) < n {
			return fmt.Errorf("%s needs %s", cmd, what)
		}
		return nil
	}
	switch c.Name {
	case "fill", "type":
		if err := need(1, "TEXT"); err != nil {
			return nil, err
		}
		req["text"] = pos[0]
	case "press":
		if err := need(1, "KEY"); err != nil {
			return nil, err
		}
		req["key"] = pos[0]
	case "select":
		if err := need(1, "VALUE"); err != nil {
			return nil, err
		}
		req["value"] = pos[0]
	case "navigate":
		if err := need(1, "URL"); err != nil {
			return nil, err
		}
		req["url"] = pos[0]
	case "upload":
		if err := need(1, "FILE"); err != nil {
			return nil, err
		}
		req["files"] = append([]string(nil), pos...)
	case "tabs":
		if len(pos) > 0 {
			req["op"] = pos[0]
		}
		switch {
		case len(pos) > 1 && pos[0] == "new":
			req["url"] = pos[1]
		case len(pos) > 1 && (pos[0] == "switch" || pos[0] == "close"):
			if n, err := strconv.Atoi(pos[1]); err == nil {
				req["index"] = n
			} else {
				req["tabId"] = pos[1]
			}
		case len(pos) == 1 && (pos[0] == "switch" || pos[0] == "close"):
			return nil, fmt.Errorf("tabs %s needs an index or id (see tabs)", pos[0])
		}
	case "cookies":
		if len(pos) > 0 {
			req["op"] = pos[0]
		}
		if len(pos) > 0 && pos[0] == "set" {
			if err := need(3, "NAME VALUE"); err != nil {
				return nil, err
			}
			agent.SetPath(req, "cookie.name", pos[1])
			agent.SetPath(req, "cookie.value", pos[2])
		}
		if len(pos) > 1 && pos[0] == "clear" {
			agent.SetPath(req, "cookie.name", pos[1])
		}
	case "storage":
		if err := need(1, "local or session"); err != nil {
			return nil, err
		}
		req["area"] = pos[0]
		if len(pos) > 1 {
			req["op"] = pos[1]
		}
		if len(pos) > 2 {
			req["key"] = pos[2]
		}
		if len(pos) > 1 && pos[1] == "set" {
			if err := need(4, "KEY VALUE"); err != nil {
				return nil, err
			}
			req["value"] = pos[3]
		}
	case "eval":
		if err := need(1, "EXPRESSION"); err != nil {
			return nil, err
		}
		req["expression"] = strings.Join(pos, " ")
	case "get", "is":
		if err := need(1, "WHAT"); err != nil {
			return nil, err
		}
		req["what"] = pos[0]
		if pos[0] == "attr" {
			if err := need(2, "an attribute name"); err != nil {
				return nil, err
			}
			req["attr"] = pos[1]
			pos = pos[1:]
		}
		if len(pos) > 1 && isRef(pos[1]) {
			req["ref"] = strings.TrimPrefix(pos[1], "@")
		}
	case "screenshot":
		if err := need(1, "FILE"); err != nil {
			return nil, err
		}
	case "dialog":
		if err := need(1, "accept or dismiss"); err != nil {
			return nil, err
		}
		req["accept"] = pos[0] == "accept"
	}
	return req, nil
}

func isRef(s string) bool {
	s = strings.TrimPrefix(s, "@")
	if len(s) < 2 || s[0] != 'e' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func printBrowserResult(w io.Writer, cmd, summary string, data json.RawMessage) {
	switch cmd {
	case "snapshot":
		var d struct{ Text string }
		_ = json.Unmarshal(data, &d)
		fmt.Fprint(w, d.Text)
		if !strings.HasSuffix(d.Text, "\n") {
			fmt.Fprintln(w)
		}
		return
	case "get", "is":
		var m map[string]json.RawMessage
		_ = json.Unmarshal(data, &m)
		for _, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				fmt.Fprintln(w, s)
			} else {
				fmt.Fprintln(w, string(v))
			}
		}
		return
	case "screenshot":
		fmt.Fprintln(w, summary)
		return
	case "tabs":
		var d struct {
			Tabs []struct {
				Index      int
				ID         string
				URL, Title string
				Current    bool
			}
		}
		_ = json.Unmarshal(data, &d)
		fmt.Fprintln(w, summary)
		for _, t := range d.Tabs {
			mark := " "
			if t.Current {
				mark = "*"
			}
			fmt.Fprintf(w, "%s %d\t%s\t%s\t%s\n", mark, t.Index, t.ID, t.URL, t.Title)
		}
		return
	case "cookies":
		var d struct {
			Cookies []struct{ Name, Value, Domain, Path string }
		}
		_ = json.Unmarshal(data, &d)
		fmt.Fprintln(w, summary)
		for _, c := range d.Cookies {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Name, c.Domain, c.Path, c.Value)
		}
		return
	case "storage":
		var d struct {
			Items []struct{ Key, Value string }
		}
		_ = json.Unmarshal(data, &d)
		fmt.Fprintln(w, summary)
		for _, it := range d.Items {
			fmt.Fprintf(w, "%s\t%s\n", it.Key, it.Value)
		}
		return
	case "eval":
		var d struct {
			Value     json.RawMessage
			Truncated bool
		}
		_ = json.Unmarshal(data, &d)
		if len(d.Value) == 0 {
			d.Value = json.RawMessage("null")
		}
		fmt.Fprintln(w, string(d.Value))
		if d.Truncated {
			fmt.Fprintln(w, summary)
		}
		return
	}
	if summary != "" {
		fmt.Fprintln(w, summary)
	}
	if cmd == "wait" && len(data) > 0 {
		fmt.Fprintln(w, string(data))
	}
}

// apiClient calls the local appliance's API with a bearer token.
type apiClient struct {
	base  string
	token string
	hc    *http.Client
}

func newAPIClient(cfg *config.Config, base, tokenFile string) (*apiClient, error) {
	if tokenFile == "" {
		tokenFile = app.AgentTokenFile(cfg)
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the token (%s): %w; run as the appliance's user or pass --token-file", tokenFile, err)
	}
	c := &apiClient{token: strings.TrimSpace(string(tok)), hc: &http.Client{Timeout: 3 * time.Minute}}
	scheme := "http"
	if app.TLSWanted(cfg) {
		scheme = "https"
	}
	if base == "" {
		host, port, _ := net.SplitHostPort(cfg.Server.Listen)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		base = scheme + "://" + net.JoinHostPort(host, port)
	}
	c.base = strings.TrimRight(base, "/")
	if strings.HasPrefix(c.base, "https://") && cfg.Server.CertFile == "" {
		// Trust exactly the appliance's own generated certificate.
		if pemBytes, err := os.ReadFile(filepath.Join(cfg.Server.DataDir, "tls-cert.pem")); err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pemBytes)
			c.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		}
	}
	return c, nil
}

func (c *apiClient) firstSession() (string, error) {
	var out struct {
		Sessions []struct {
			ID    string
			State session.State
		}
	}
	if code := c.call("GET", "/api/v1/sessions", nil, &out, io.Discard); code != exitOK {
		return "", errors.New("cannot list sessions")
	}
	for _, s := range out.Sessions {
		if s.State == session.StateReady {
			return s.ID, nil
		}
	}
	return "", errors.New("no ready session; create one in the panel or pass --session")
}

// putFile puts a local file into the session's upload area under its base
// name.
func (c *apiClient) putFile(session, path string, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast browser:", err)
		return exitError
	}
	defer f.Close()
	req, err := http.NewRequest("PUT", c.base+"/api/v1/sessions/"+url.PathEscape(session)+"/uploads/"+url.PathEscape(filepath.Base(path)), f)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast browser:", err)
		return exitUsage
	}
	if st, err := f.Stat(); err == nil {
		req.ContentLength = st.Size()
	}
	return c.send(req, nil, stderr)
}

// call returns an exit code; on failure it prints the API's error.
func (c *apiClient) call(method, path string, body any, out any, stderr io.Writer) int {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast browser:", err)
		return exitUsage
	}
	req.Header.Set("Content-Type", "application/json")
	return c.send(req, out, stderr)
}

// send sends req with the token; see call.
func (c *apiClient) send(req *http.Request, out any, stderr io.Writer) int {
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast browser: the appliance does not answer:", err)
		return exitUnavailable
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode/100 == 2 {
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				fmt.Fprintln(stderr, "tabcast browser: bad answer:", err)
				return exitError
			}
		}
		return exitOK
	}
	var e struct {
		Error struct{ Code, Message, Hint string }
	}
	_ = json.Unmarshal(b, &e)
	fmt.Fprintf(stderr, "%s: %s\n", e.Error.Code, e.Error.Message)
	if e.Error.Hint != "" {
		fmt.Fprintln(stderr, "hint:", e.Error.Hint)
	}
	switch resp.StatusCode {
	case 401, 403:
		return exitAuth
	case 404:
		return exitNotFound
	case 409:
		return exitConflict
	case 504:
		return exitTimeout
	case 429, 503:
		return exitUnavailable
	case 413, 422:
		return exitUsage
	}
	return exitError
}
