// Package harness starts the real appliance (`tabcast run` and its plugin
// processes) for end-to-end tests and the benchmark.
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tabcast/tabcast/plugins"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// repoRoot finds the module root from this source file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binaries returns the directory holding tabcast and the plugins: $TABCAST_BIN
// (set by `make test`), else a fresh build in a temporary directory.
func Binaries() (string, error) {
	if d := os.Getenv("TABCAST_BIN"); d != "" {
		return d, nil
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tabcast-bin-")
		if buildErr != nil {
			return
		}
		// The plugins are the catalog's, each built from its folder.
		pkgs := map[string]string{"./appliance": "tabcast"}
		for _, name := range plugins.Bundled() {
			pkgs["./"+name] = name
		}
		for pkg, out := range pkgs {
			cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, out), pkg)
			cmd.Dir = repoRoot()
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	return buildDir, buildErr
}

// Appliance is one running `tabcast run`.
type Appliance struct {
	URL string // http://127.0.0.1:PORT
	// Token is the agent CLI token the appliance wrote at first start (an
	// admin's): Do sends it.
	Token string
	// TempDir is the appliance's TMPDIR (Chromium profiles, download dirs).
	TempDir string
	// DataDir is the appliance's server.dataDir.
	DataDir string
	// UsersFile is the auth-local users file; AdminPassword is the
	// password of its user "admin" (no forced change).
	UsersFile     string
	AdminPassword string
	// InitialPassword is the one-time admin password a first start printed.
	InitialPassword string
	// Client talks to the appliance (it trusts its certificate over TLS).
	Client  *http.Client
	Cmd     *exec.Cmd
	LogPath string
	// ConfigFile is the config file it reads (empty at start; a test may
	// edit it and send SIGHUP).
	ConfigFile string
	done       chan struct{}
	waitErr    error

	outMu sync.Mutex
	out   strings.Builder // stdout, the console
}

// Stdout is what the appliance printed on its console so far.
func (a *Appliance) Stdout() string {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	return a.out.String()
}

var panelLine = regexp.MustCompile(`Open the panel: (https?://[^ /]+)/`)

// Start runs `tabcast run` on a free loopback port with extra `--set`
// values and waits until it prints its panel URL.
func Start(ctx context.Context, logDir string, sets ...string) (*Appliance, error) {
	return StartWith(ctx, logDir, Options{}, sets...)
}

// Options change how StartWith prepares the appliance.
type Options struct {
	// NoUsers leaves the users file empty: the appliance's first start
	// creates admin with a one-time password (InitialPassword).
	NoUsers bool
	// Listen is the address to serve on (default "127.0.0.1:0").
	Listen string
	// Env is added to the appliance's environment (its plugins inherit it).
	Env []string
	// NetNS runs the appliance (and its Chromium and plugins) inside this
	// network namespace (ip netns exec: its /etc/netns/NAME files, such as
	// a resolv.conf, replace the host's). Listen must then be one of the
	// namespace's addresses the test reaches.
	NetNS string
}

var firstStartLine = regexp.MustCompile(`one-time password (\S+) `)

// StartWith is Start with options.
func StartWith(ctx context.Context, logDir string, o Options, sets ...string) (*Appliance, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	// An explicit (empty) config file keeps a machine's /etc/tabcast out.
	cfgPath := filepath.Join(logDir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("# test: embedded defaults\n"), 0o600); err != nil {
		return nil, err
	}
	// State and users live in the test's directory; admin exists with a
	// known password, so tests log in without the first-start change.
	dataDir := filepath.Join(logDir, "data")
	usersFile := filepath.Join(logDir, "users.yaml")
	if !o.NoUsers {
		if err := AddUser(usersFile, "admin", "admin", AdminPassword); err != nil {
			return nil, err
		}
	}
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	args := []string{"run", "--config", cfgPath, "--listen", listen, "--set", "plugins.dir=" + bin,
		"--set", "server.dataDir=" + dataDir,
		"--set", "plugins.config.auth-local.usersFile=" + usersFile,
		"--set", "plugins.config.auth-local.initialPasswordFile=" + filepath.Join(logDir, "initial-admin-password"),
		// Media on ephemeral ports and no relay, unless a test asks (tests
		// may run beside another appliance); the relay's secret stays here.
		"--set", "webrtc.udpPort=0", "--set", "webrtc.tcp=false", "--set", "turn.enabled=false",
		"--set", "plugins.config.turnd.secretFile=" + filepath.Join(logDir, "turn-secret"),
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(filepath.Join(bin, "tabcast"), args...)
	if o.NetNS != "" {
		// ip execs tabcast: the pid is tabcast's own.
		cmd = exec.Command("ip", append([]string{"netns", "exec", o.NetNS, filepath.Join(bin, "tabcast")}, args...)...)
	}
	// tabcast refuses TABCAST_* variables that name no config key, and the
	// test runner's own (TABCAST_BIN) are not config.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TABCAST_") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Its own temp dir: what it leaves behind is countable, apart from
	// other tests' and appliances'.
	// Short: Chromium's singleton socket lives under it, and a Unix socket
	// path may not exceed 107 bytes (a test's TempDir is too long).
	tmp, err := os.MkdirTemp("", "tcx")
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	cmd.Env = append(cmd.Env, o.Env...)
	logPath := filepath.Join(logDir, "tabcast.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(tmp)
		logf.Close()
		return nil, err
	}
	a := &Appliance{Cmd: cmd, LogPath: logPath, ConfigFile: cfgPath, done: make(chan struct{}), DataDir: dataDir, TempDir: tmp,
		UsersFile: usersFile, Client: &http.Client{Timeout: 2 * time.Minute}}
	if !o.NoUsers {
		a.AdminPassword = AdminPassword
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			a.outMu.Lock()
			a.out.WriteString(sc.Text() + "\n")
			a.outMu.Unlock()
			if m := firstStartLine.FindStringSubmatch(sc.Text()); m != nil {
				a.InitialPassword = m[1] // written before the panel line
			}
			if m := panelLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		a.waitErr = cmd.Wait()
		logf.Close()
		_ = os.RemoveAll(tmp)
		close(a.done)
	}()
	select {
	case a.URL = <-urlc:
		if b, err := os.ReadFile(filepath.Join(dataDir, "agent-token")); err == nil {
			a.Token = strings.TrimSpace(string(b))
		}
		if err := a.trustCertificate(); err != nil {
			a.Kill()
			return nil, err
		}
		return a, nil
	case <-a.done:
		return nil, fmt.Errorf("tabcast exited before serving: %v\n%s", a.waitErr, a.LogTail(4000))
	case <-ctx.Done():
		a.Kill()
		return nil, fmt.Errorf("tabcast did not start: %w\n%s", ctx.Err(), a.LogTail(4000))
	}
}

// LogTail returns the end of the appliance's log.
func (a *Appliance) LogTail(n int) string {
	b, _ := os.ReadFile(a.LogPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Stop sends SIGTERM and waits for a clean exit.
func (a *Appliance) Stop(timeout time.Duration) error {
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		return a.waitErr
	case <-time.After(timeout):
		a.Kill()
		return errors.New("tabcast did not stop after SIGTERM")
	}
}

// Kill sends SIGKILL and waits.
func (a *Appliance) Kill() {
	_ = a.Cmd.Process.Kill()
	<-a.done
}

// Done is closed when the process exited.
func (a *Appliance) Done() <-chan struct{} { return a.done }

// SessionSnapshot is the part of a session snapshot tests read.
type SessionSnapshot struct {
	ID    string `json:"id"`
	State string `json:"state"`
	URL   string `json:"url"`
	Title string `json:"title"`
	Owner string `json:"owner"`
	// CaptureMode is tab or cdp; CaptureFallback why tab went over to cdp.
	CaptureMode     string `json:"captureMode"`
	CaptureFallback string `json:"captureFallback"`
	Pipelines       []struct {
		Codec    string `json:"codec"`
		Encoder  string `json:"encoder"`
		Hardware bool   `json:"hardware"`
		// EncoderFallback: the hardware encoder that failed at run time.
		EncoderFallback string `json:"encoderFallback"`
		FramesEncoded   uint64 `json:"framesEncoded"`
		FramesDropped   uint64 `json:"framesDropped"`
		TargetKbps      int    `json:"targetKbps"`
		IdleRepeats     uint64 `json:"idleRepeats"`
		Size            string `json:"size"`
		FrameAge        struct {
			P50 float64 `json:"p50Ms"`
			P95 float64 `json:"p95Ms"`
		} `json:"frameAge"`
		EncodeDuration struct {
			P50 float64 `json:"p50Ms"`
			P95 float64 `json:"p95Ms"`
		} `json:"encodeDuration"`
	} `json:"pipelines"`
}

// Sessions lists the appliance's sessions.
func (a *Appliance) Sessions(ctx context.Context) ([]SessionSnapshot, error) {
	var out struct {
		OK       bool              `json:"ok"`
		Sessions []SessionSnapshot `json:"sessions"`
	}
	if err := a.Do(ctx, http.MethodGet, "/api/v1/sessions", "", &out); err != nil {
		return nil, err
	}
	return out.Sessions, nil
}

// DefaultSession waits for the default session to be ready and returns it.
func (a *Appliance) DefaultSession(ctx context.Context) (SessionSnapshot, error) {
	for {
		ss, err := a.Sessions(ctx)
		if err == nil && len(ss) > 0 && ss[0].State == "ready" {
			return ss[0], nil
		}
		select {
		case <-ctx.Done():
			return SessionSnapshot{}, fmt.Errorf("no ready default session: %w (last: %v %v)", ctx.Err(), ss, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Do calls the JSON API. A non-2xx answer is an error carrying the body.
func (a *Appliance) Do(ctx context.Context, method, path, body string, out any) error {
	b, err := a.call(ctx, method, path, body)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// DoRaw is Do for a body that is not JSON.
func (a *Appliance) DoRaw(ctx context.Context, method, path string, out *string) error {
	b, err := a.call(ctx, method, path, "")
	*out = string(b)
	return err
}

func (a *Appliance) call(ctx context.Context, method, path, body string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return b, &HTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	return b, nil
}

// HTTPError is a non-2xx API answer.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// Descendants returns the PIDs of every process below pid (from /proc).
func Descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[p] {
			out = append(out, c)
			stack = append(stack, c)
		}
	}
	return out
}

func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	var state string
	var ppid int
	if _, err := fmt.Sscanf(s[i+2:], "%s %d", &state, &ppid); err != nil {
		return 0, false
	}
	return ppid, true
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}
