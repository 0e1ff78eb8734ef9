package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // TURN REST credentials are HMAC-SHA1 by definition
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	turnapi "github.com/tabcast/tabcast/plugins/turn"
	"github.com/tabcast/tabcast/turnd/relay"
)

// The TURN servers the relay bench runs side by side: turnd (this
// project's relay, as a child process) and coturn (the baseline).

// turnServerRun is one running TURN server process and a credential for it.
type turnServerRun struct {
	name       string
	addr       *net.UDPAddr
	user, pass string
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	tail       *tailBuffer
	done       chan struct{}
}

func (s *turnServerRun) cpu() time.Duration {
	p, _, _ := readProc(s.cmd.Process.Pid)
	return p.cpu
}

func (s *turnServerRun) stop() {
	if s.stdin != nil {
		s.stdin.Close()
	}
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// tailBuffer keeps the last few KiB a process wrote, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > 8192 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-4096:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// turnChildConfig is what the parent hands the turnd child (JSON in the
// environment).
type turnChildConfig struct {
	Config json.RawMessage `json:"config"`
}

func init() {
	if v := os.Getenv(turnChildEnv); v != "" {
		if err := turndChild(v); err != nil {
			fmt.Fprintln(os.Stderr, "turnd child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// turndChild runs turnd as the plugin would (New, SetConfig,
// MintCredential), prints one credential and serves until stdin closes.
func turndChild(v string) error {
	var cc turnChildConfig
	if err := json.Unmarshal([]byte(v), &cc); err != nil {
		return err
	}
	p := relay.New(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx := context.Background()
	if err := p.SetConfig(ctx, cc.Config); err != nil {
		return err
	}
	defer p.Shutdown(ctx)
	cred, err := p.MintCredential(ctx, turnapi.Scope{User: "bench", Session: "bench", Peer: "bench", Generation: 1}, turnapi.MaxTTL)
	if err != nil {
		return err
	}
	fmt.Printf("cred %s %s\n", cred.Username, cred.Password)
	_, _ = io.Copy(io.Discard, os.Stdin)
	st, _ := p.Status(ctx)
	fmt.Fprintf(os.Stderr, "turnd status at exit: %+v\n", st)
	return nil
}

func startTurnd(relayLo, relayHi, sinkPort int, dir string) (*turnServerRun, error) {
	port, err := freeUDPPort()
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"listenUDP":              fmt.Sprintf("127.0.0.1:%d", port),
		"listenTCP":              "",
		"relayAddress":           "127.0.0.1",
		"relayPortMin":           relayLo,
		"relayPortMax":           relayHi,
		"secretFile":             filepath.Join(dir, "turn-secret"),
		"selfAddresses":          []string{"127.0.0.1"},
		"selfPorts":              []int{sinkPort},
		"maxAllocationsPerUser":  1000,
		"maxAllocations":         1000,
		"relayKbpsPerAllocation": turnPerAllocCap,
		"relayKbpsTotal":         turnTotalCap,
	}
	cj, _ := json.Marshal(cfg)
	env, _ := json.Marshal(turnChildConfig{Config: cj})
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), turnChildEnv+"="+string(env))
	tail := &tailBuffer{}
	cmd.Stderr = tail
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &turnServerRun{name: "turnd", addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, cmd: cmd, stdin: stdin, tail: tail, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		l, _ := r.ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case l := <-line:
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "cred" {
			s.stop()
			return nil, fmt.Errorf("turnd child did not start: %q; stderr: %s", l, tail.String())
		}
		s.user, s.pass = f[1], f[2]
	case <-time.After(10 * time.Second):
		s.stop()
		return nil, fmt.Errorf("turnd child: no credential within 10 s; stderr: %s", tail.String())
	}
	return s, nil
}

func startCoturn(relayLo, relayHi int, dir string) (*turnServerRun, []string, error) {
	port, err := freeUDPPort()
	if err != nil {
		return nil, nil, err
	}
	conf := filepath.Join(dir, "turnserver.conf") // empty: ignore /etc/turnserver.conf
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		return nil, nil, err
	}
	args := []string{"-c", conf, "--use-auth-secret", "--static-auth-secret=" + turnSecret, "--realm=tabcast",
		"--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1", fmt.Sprintf("--listening-port=%d", port),
		fmt.Sprintf("--min-port=%d", relayLo), fmt.Sprintf("--max-port=%d", relayHi),
		"--no-cli", "--no-tls", "--no-dtls", "--no-tcp", "--allow-loopback-peers", "--no-software-attribute", "--no-rfc5780",
		"--log-file=stdout", "--simple-log", "--pidfile=" + filepath.Join(dir, "turnserver.pid"),
		"--userdb=" + filepath.Join(dir, "turndb")}
	cmd := exec.Command("/usr/bin/turnserver", args...)
	tail := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = tail, tail
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("coturn: %w (apt-get install coturn)", err)
	}
	s := &turnServerRun{name: "coturn", addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, cmd: cmd, tail: tail, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	s.user = strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10) + ":bench"
	mac := hmac.New(sha1.New, []byte(turnSecret))
	mac.Write([]byte(s.user))
	s.pass = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	// Wait until it answers an Allocate.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := turnAllocate(s, 300*time.Millisecond)
		if err == nil {
			a.close()
			break
		}
		select {
		case <-s.done:
			return nil, nil, fmt.Errorf("coturn exited: %s", tail.String())
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, nil, fmt.Errorf("coturn: no allocation within 10 s: %v; log: %s", err, tail.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s, args, nil
}

func coturnVersion() string {
	out, _ := exec.Command("dpkg-query", "-W", "-f=${Version}", "coturn").Output()
	if len(out) == 0 {
		return "coturn"
	}
	return "coturn " + string(out)
}
