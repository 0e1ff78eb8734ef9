package firstboot

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/auth-local/users"
	"golang.org/x/crypto/ssh"
)

// Cheap argon2 parameters: the tests check format and code paths, not cost.
var testParams = users.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

const testPassword = "correct horse battery staple"

type env struct {
	o         Options
	esp, file string
	hostnames []string
	sshStarts int
}

// newEnv lays out an ESP, a state dir seeded like seed-etc does (the
// image's config.yaml) and a root with the image's /etc/hosts.
func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{esp: filepath.Join(dir, "efi")}
	e.file = filepath.Join(e.esp, FileName)
	defaults, err := os.ReadFile("../config.default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	imageCfg, err := os.ReadFile("../../image/rootfs/etc/tabcast/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e.o = Options{ESP: e.esp, State: filepath.Join(dir, "state"), Root: filepath.Join(dir, "root"), Defaults: defaults}
	e.o.Admin = storeAdmin{}
	e.o.Hooks = Hooks{
		SetHostname: func(n string) error { e.hostnames = append(e.hostnames, n); return nil },
		StartSSH:    func() error { e.sshStarts++; return nil },
	}
	for _, d := range []string{e.esp, e.o.State, filepath.Join(e.o.Root, "etc")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(e.o.State, "config.yaml"), string(imageCfg))
	write(t, filepath.Join(e.o.Root, "etc/hostname"), "tabcast\n")
	write(t, filepath.Join(e.o.Root, "etc/hosts"), "127.0.0.1\tlocalhost\n127.0.1.1\ttabcast\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
	return e
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

func testHash(t *testing.T) string {
	t.Helper()
	h, err := users.HashPassword([]byte(testPassword), testParams)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func testKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " it@corp"
}

func fullFile(hash, key string) string {
	return `hostname: tabcast-lab-1
network:
  address: 192.168.10.20/24
  gateway: 192.168.10.1
  dns: [192.168.10.1]
ntp: [ntp1.corp.lan, 192.168.10.2]
adminPasswordHash: "` + hash + `"
ssh:
  authorizedKeys: ["` + key + `"]
config:
  webrtc:
    advertise: ["203.0.113.7"]
  video:
    fps: 24
`
}

func TestApplyFullFile(t *testing.T) {
	e := newEnv(t)
	hash, key := testHash(t), testKey(t)
	write(t, e.file, fullFile(hash, key))

	res, err := Apply(e.o)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !res.Found || !res.Applied {
		t.Fatalf("result %+v: want found and applied", res)
	}
	if exists(e.file) || exists(e.file+RejectedSuffix) {
		t.Fatal("the set-up file is still on the ESP")
	}

	// Persisted on the data partition.
	if got := read(t, filepath.Join(e.o.State, hostnameFile)); got != "tabcast-lab-1\n" {
		t.Errorf("persisted hostname %q", got)
	}
	if got := read(t, filepath.Join(e.o.State, ntpFile)); got != "ntp1.corp.lan\n192.168.10.2\n" {
		t.Errorf("persisted ntp %q", got)
	}
	if got := read(t, filepath.Join(e.o.State, authorizedKeys)); got != key+"\n" {
		t.Errorf("persisted authorized_keys %q", got)
	}

	// config.yaml: merged, its comments kept, valid for the appliance.
	cfgText := read(t, filepath.Join(e.o.State, "config.yaml"))
	if !strings.Contains(cfgText, "# Tabcast appliance image configuration.") || !strings.Contains(cfgText, mergedComment) {
		t.Errorf("config.yaml lost its comments or the merge mark:\n%s", cfgText)
	}
	cfg, err := config.Load(config.Options{Defaults: e.o.Defaults, File: filepath.Join(e.o.State, "config.yaml")})
	if err != nil {
		t.Fatalf("merged config does not load: %v", err)
	}
	if !slices.Equal(cfg.WebRTC.Advertise, []string{"203.0.113.7"}) || cfg.Video.FPS != 24 || cfg.Server.Listen != ":443" {
		t.Errorf("merged config: advertise %v fps %d listen %q", cfg.WebRTC.Advertise, cfg.Video.FPS, cfg.Server.Listen)
	}

	// Applied to the root.
	if got := read(t, filepath.Join(e.o.Root, etcHostname)); got != "tabcast-lab-1\n" {
		t.Errorf("/etc/hostname %q", got)
	}
	if hosts := read(t, filepath.Join(e.o.Root, etcHosts)); !strings.Contains(hosts, "127.0.1.1\ttabcast-lab-1\n") || strings.Contains(hosts, "\ttabcast\n") {
		t.Errorf("/etc/hosts:\n%s", hosts)
	}
	nw := read(t, filepath.Join(e.o.Root, networkdFile))
	for _, want := range []string{"Name=en* eth*", "Address=192.168.10.20/24", "Gateway=192.168.10.1", "DNS=192.168.10.1"} {
		if !strings.Contains(nw, want+"\n") {
			t.Errorf("%s lacks %q:\n%s", networkdFile, want, nw)
		}
	}
	if filepath.Base(networkdFile) >= "80-tabcast-dhcp.network" {
		t.Errorf("%s does not sort before 80-tabcast-dhcp.network", networkdFile)
	}
	if src := read(t, filepath.Join(e.o.Root, chronySources)); !strings.Contains(src, "server ntp1.corp.lan iburst\nserver 192.168.10.2 iburst\n") {
		t.Errorf("chrony sources:\n%s", src)
	}
	if got := read(t, filepath.Join(e.o.Root, sshAuthKeys)); got != key+"\n" {
		t.Errorf("root authorized_keys %q", got)
	}
	for _, typ := range hostKeyTypes {
		name := "ssh_host_" + typ + "_key"
		persisted := read(t, filepath.Join(e.o.State, sshDir, name))
		if _, err := ssh.ParsePrivateKey([]byte(persisted)); err != nil {
			t.Errorf("persisted %s: %v", name, err)
		}
		if installed := read(t, filepath.Join(e.o.Root, sshEtcDir, name)); installed != persisted {
			t.Errorf("installed %s differs from the persisted one", name)
		}
		if st, err := os.Stat(filepath.Join(e.o.Root, sshEtcDir, name)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("installed %s: mode %v, %v", name, st.Mode(), err)
		}
	}
	if !slices.Equal(e.hostnames, []string{"tabcast-lab-1"}) || e.sshStarts != 1 {
		t.Errorf("hooks: hostname %v, ssh starts %d", e.hostnames, e.sshStarts)
	}

	checkAdmin(t, e, true)
}

// checkAdmin checks, with auth-local's own code, that admin logs in with
// testPassword without a forced change, and that auth-local's first start
// makes no one-time password.
func checkAdmin(t *testing.T, e *env, wantUsersFileOnly bool) {
	t.Helper()
	usersFile := filepath.Join(e.o.State, "users.yaml")
	pwFile := filepath.Join(e.o.State, "initial-admin-password")
	st, err := users.Open(usersFile)
	if err != nil {
		t.Fatalf("auth-local cannot open the users file: %v", err)
	}
	u, ok := st.Verify("admin", []byte(testPassword))
	if !ok || u.Role != users.RoleAdmin || u.MustChangePassword {
		t.Fatalf("admin: %+v, verified %v: want an admin without a forced change", u, ok)
	}
	if _, ok := st.Verify("admin", []byte("wrong password!!")); ok {
		t.Fatal("a wrong password verifies")
	}
	a := users.New(nil)
	cfg, _ := json.Marshal(map[string]string{"usersFile": usersFile, "initialPasswordFile": pwFile})
	if err := a.SetConfig(context.Background(), cfg); err != nil {
		t.Fatalf("auth-local SetConfig: %v", err)
	}
	if exists(pwFile) {
		t.Fatal("auth-local's first start wrote a one-time admin password despite adminPasswordHash")
	}
	if wantUsersFileOnly && len(st.List()) != 1 {
		t.Errorf("users: %+v, want admin only", st.List())
	}
}

func TestReapplyIdempotentAndAfterUpdate(t *testing.T) {
	e := newEnv(t)
	write(t, e.file, fullFile(testHash(t), testKey(t)))
	if _, err := Apply(e.o); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		m := map[string]string{}
		for _, d := range []string{e.o.Root, e.o.State} {
			_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
				if err == nil && de.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					m[p] = string(b)
				}
				return nil
			})
		}
		return m
	}
	before := snapshot()
	res, err := Apply(e.o) // next boot: no file on the ESP
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || len(res.Reapply) != 0 {
		t.Fatalf("second boot: %+v, want nothing found and nothing rewritten", res)
	}
	if after := snapshot(); !maps.Equal(before, after) {
		t.Fatal("second boot changed files")
	}

	// An update brings a root without the settings: they come back, with
	// the same host keys.
	for _, rel := range []string{etcHostname, networkdFile, chronySources, sshEtcDir} {
		if err := os.RemoveAll(filepath.Join(e.o.Root, rel)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(e.o.Root, etcHostname), "tabcast\n")
	changed, err := Reapply(e.o)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) == 0 {
		t.Fatal("nothing re-applied to a fresh root")
	}
	if after := snapshot(); !maps.Equal(before, after) {
		t.Fatal("re-applied root differs from the first one")
	}
}

// assertNothingApplied checks that a rejected file left the state and the
// root as they were.
func assertNothingApplied(t *testing.T, e *env, cfgBefore string) {
	t.Helper()
	if exists(e.file) || !exists(e.file+RejectedSuffix) {
		t.Fatal("a rejected file was not renamed to .rejected")
	}
	for _, rel := range []string{systemDir, sshDir, "users.yaml"} {
		if exists(filepath.Join(e.o.State, rel)) {
			t.Errorf("state %s written from a rejected file", rel)
		}
	}
	if got := read(t, filepath.Join(e.o.State, "config.yaml")); got != cfgBefore {
		t.Error("config.yaml changed by a rejected file")
	}
	if got := read(t, filepath.Join(e.o.Root, etcHostname)); got != "tabcast\n" {
		t.Errorf("/etc/hostname changed by a rejected file: %q", got)
	}
	if exists(filepath.Join(e.o.Root, networkdFile)) || len(e.hostnames) > 0 || e.sshStarts > 0 {
		t.Error("system settings applied from a rejected file")
	}
}

func TestUnknownKeyRejected(t *testing.T) {
	e := newEnv(t)
	cfgBefore := read(t, filepath.Join(e.o.State, "config.yaml"))
	hash, key := testHash(t), testKey(t)
	write(t, e.file, strings.Replace(fullFile(hash, key), "hostname:", "hostnme:", 1)+"extra: 1\n")
	b, _ := os.ReadFile(e.file)
	write(t, e.file, strings.Replace(string(b), "  gateway:", "  gatway:", 1))

	res, err := Apply(e.o)
	if !errors.Is(err, ErrRejected) || res.Applied {
		t.Fatalf("Apply: %v, %+v; want ErrRejected", err, res)
	}
	for _, want := range []string{`"hostnme"`, `"extra"`, `"network.gatway"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	assertNothingApplied(t, e, cfgBefore)
	assertNoSecrets(t, err, hash, key)
}

func TestBadConfigValueRejected(t *testing.T) {
	for name, tc := range map[string]struct{ config, key string }{
		"value":   {"  video:\n    fps: 0\n", "video.fps"},
		"key":     {"  webrtc:\n    advertize: [203.0.113.7]\n", "webrtc.advertize"},
		"section": {"  nosuch:\n    x: 1\n", "nosuch"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			cfgBefore := read(t, filepath.Join(e.o.State, "config.yaml"))
			hash := testHash(t)
			write(t, e.file, "hostname: lab\nadminPasswordHash: '"+hash+"'\nconfig:\n"+tc.config)
			_, err := Apply(e.o)
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("Apply: %v; want ErrRejected", err)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error does not name %s: %v", tc.key, err)
			}
			if strings.Contains(err.Error(), os.TempDir()) {
				t.Errorf("error names a temp file: %v", err)
			}
			assertNothingApplied(t, e, cfgBefore)
			assertNoSecrets(t, err, hash)
		})
	}
}

func TestBadValuesRejectedWithoutSecrets(t *testing.T) {
	key := testKey(t)
	keyBody := strings.Fields(key)[1]
	for name, tc := range map[string]struct{ file, key string }{
		"hostname":    {"hostname: -bad-\n", "hostname"},
		"address":     {"network:\n  address: 192.168.10.20\n", "network.address"},
		"gateway v6":  {"network:\n  address: 192.168.10.20/24\n  gateway: fe80::1\n", "network.gateway"},
		"dhcp+static": {"network:\n  dhcp: true\n  address: 10.0.0.2/8\n", "network.dhcp"},
		"ntp":         {"ntp: ['a b']\n", "ntp[0]"},
		"bcrypt":      {"adminPasswordHash: '$2y$10$abcdefghijklmnopqrstuuJ1yQ3ZlFJx9Sx0wF1b0eM5lJ0WQeW6'\n", "adminPasswordHash"},
		"weak argon":  {"adminPasswordHash: '$argon2id$v=19$m=64,t=99,p=1$c2FsdHNhbHRzYWx0$a2V5a2V5a2V5a2V5a2V5a2V5'\n", "adminPasswordHash"},
		"key":         {"ssh:\n  authorizedKeys: ['ssh-ed25519 AAAAnotakey" + keyBody[10:] + "']\n", "ssh.authorizedKeys[0]"},
		"two keys":    {"ssh:\n  authorizedKeys: [\"" + key + "\\n" + key + "\"]\n", "ssh.authorizedKeys[0]"},
		"keys type":   {"ssh:\n  authorizedKeys: '" + key + "'\n", "wrong type"},
		"config type": {"config: [1]\n", "config"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			write(t, e.file, tc.file)
			_, err := Apply(e.o)
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("Apply: %v; want ErrRejected", err)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error does not name %s: %v", tc.key, err)
			}
			assertNoSecrets(t, err, "$2y$10$abcdefghijkl", "m=64,t=99", keyBody[10:30], "AAAAnotakey")
		})
	}
}

func assertNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if body := strings.Fields(s); len(body) > 1 {
			s = body[1] // an SSH key: its base64
		}
		if strings.Contains(err.Error(), s) {
			t.Errorf("error message contains a secret: %v", err)
		}
	}
}

// A file dropped after the first start: the admin auth-local made (with a
// one-time password) gets the hash, and the stale password file goes.
func TestAdminHashReplacesOneTimePassword(t *testing.T) {
	e := newEnv(t)
	usersFile := filepath.Join(e.o.State, "users.yaml")
	pwFile := filepath.Join(e.o.State, "initial-admin-password")
	st, err := users.Open(usersFile)
	if err != nil {
		t.Fatal(err)
	}
	created, oneTime, err := users.EnsureAdmin(st, pwFile)
	if err != nil || !created || !exists(pwFile) {
		t.Fatalf("EnsureAdmin: %v %v", created, err)
	}
	if err := st.Add("viewer1", "viewer password 1", users.RoleViewer); err != nil {
		t.Fatal(err)
	}
	write(t, e.file, "adminPasswordHash: '"+testHash(t)+"'\n")
	if _, err := Apply(e.o); err != nil {
		t.Fatal(err)
	}
	if exists(pwFile) {
		t.Error("the stale one-time password file is still there")
	}
	if _, ok := st.Verify("admin", []byte(oneTime)); ok {
		t.Error("the one-time password still logs in")
	}
	if _, ok := st.Verify("viewer1", []byte("viewer password 1")); !ok {
		t.Error("another user was lost")
	}
	checkAdmin(t, e, false)
}

func TestLaterFileRevertsToDHCPAndDropsKeys(t *testing.T) {
	e := newEnv(t)
	write(t, e.file, fullFile(testHash(t), testKey(t)))
	if _, err := Apply(e.o); err != nil {
		t.Fatal(err)
	}
	write(t, e.file, "network:\n  dhcp: true\nntp: []\nssh:\n  authorizedKeys: []\n")
	if _, err := Apply(e.o); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{networkdFile, chronySources, sshAuthKeys} {
		if exists(filepath.Join(e.o.Root, rel)) {
			t.Errorf("/%s still there", rel)
		}
	}
	if got := read(t, filepath.Join(e.o.Root, etcHostname)); got != "tabcast-lab-1\n" {
		t.Errorf("hostname (not in the later file) changed: %q", got)
	}
}

// What root applies must come from files only root can write: the state
// dir belongs to the tabcast user.
func TestUntrustedStateIgnored(t *testing.T) {
	e := newEnv(t)
	write(t, e.file, "hostname: lab-2\n")
	if _, err := Apply(e.o); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(e.o.State, systemDir)
	if err := os.Chmod(sys, 0o770); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(e.o.Root, etcHostname), "tabcast\n")
	_, err := Reapply(e.o)
	if err == nil || !strings.Contains(err.Error(), "writable by group") {
		t.Fatalf("Reapply from a group-writable dir: %v", err)
	}
	if got := read(t, filepath.Join(e.o.Root, etcHostname)); got != "tabcast\n" {
		t.Errorf("hostname applied from an untrusted dir: %q", got)
	}
	if err := os.Chmod(sys, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(sys, "hostname")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(sys, "hostname")); err != nil {
		t.Fatal(err)
	}
	if _, err := Reapply(e.o); err == nil {
		t.Fatal("Reapply followed a symlink in the state dir")
	}
}

func TestNoFile(t *testing.T) {
	e := newEnv(t)
	res, err := Apply(e.o)
	if err != nil || res.Found || len(res.Reapply) != 0 {
		t.Fatalf("no file: %+v, %v", res, err)
	}
	if exists(filepath.Join(e.o.State, systemDir)) || exists(filepath.Join(e.o.Root, networkdFile)) {
		t.Error("files written without a set-up file")
	}
}

// Values under secret-sounding keys are removed even where the appliance's
// config loader quotes a bad value.
func TestConfigSecretValueRedacted(t *testing.T) {
	e := newEnv(t)
	write(t, e.file, "config:\n  auth:\n    agentTokenFile: relative-s3cr3t-value\n")
	_, err := Apply(e.o)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "auth.agentTokenFile") {
		t.Fatalf("Apply: %v; want ErrRejected naming auth.agentTokenFile", err)
	}
	assertNoSecrets(t, err, "relative-s3cr3t-value")
}

func TestRedact(t *testing.T) {
	hash, key := testHash(t), testKey(t)
	msg := "line 3: cannot use " + hash + " or " + key + " or " + strings.Fields(key)[1][:30] + "..."
	got := redact(msg, nil)
	if strings.Contains(got, "argon2id$v=19$m=") || strings.Contains(got, strings.Fields(key)[1][:20]) {
		t.Errorf("patterns not redacted: %s", got)
	}
	if got := redact("value other-secret-x here", []string{"other-secret-x"}); got != "value [redacted] here" {
		t.Errorf("listed secret not redacted: %s", got)
	}
}

// storeAdmin is the tabcast command's AdminHash (which runs `auth-local
// users check-hash|set-hash`) on auth-local's own store, in process.
type storeAdmin struct{}

func (storeAdmin) Check(h string) error { return users.CheckHash(h) }

func (storeAdmin) Set(file, h string) error {
	s, err := users.Open(file)
	if err != nil {
		return err
	}
	return s.SetHash("admin", users.RoleAdmin, h)
}
