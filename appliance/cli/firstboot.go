package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/appliance/firstboot"
)

const firstbootUsage = `usage: tabcast firstboot COMMAND ...
Unattended set-up from tabcast-firstboot.yaml on the ESP (docs/operations.md,
"Unattended first boot"). Run by tabcast-system.service at every boot.

  tabcast firstboot apply [--esp /efi] [--state /var/lib/tabcast/etc] [--root /]
      If ESP/tabcast-firstboot.yaml exists: check all of it, persist it in the
      state dir and delete it; or, when anything in it is wrong, apply none of
      it and rename it to tabcast-firstboot.yaml.rejected. Then write the
      persisted settings (host name, network, NTP, SSH) into the root's /etc.
      With --root other than /, only files are written (no hostname, no sshd).
  tabcast firstboot host-keys [--state DIR] [--root /]
      Make the SSH host keys once (state dir) and install them for sshd
      (/etc/ssh/tabcast). Run by ssh.service before sshd starts.

Exit codes: 0 done, 1 failed, 2 usage, 3 the file was rejected.
`

func cmdFirstboot(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "apply" && args[0] != "host-keys") {
		fmt.Fprint(stderr, firstbootUsage)
		return 2
	}
	fs := pflag.NewFlagSet("firstboot "+args[0], pflag.ContinueOnError)
	fs.SetOutput(stderr)
	esp := fs.String("esp", "/efi", "the ESP's mount point")
	state := fs.String("state", "/var/lib/tabcast/etc", "persistent settings dir (/etc/tabcast links here)")
	root := fs.String("root", "/", "root file system to apply the settings to")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, firstbootUsage)
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tabcast firstboot: unexpected arguments: %v\n", fs.Args())
		return 2
	}
	o := firstboot.Options{ESP: *esp, State: *state, Root: *root, Defaults: defaultConfig, Log: stdout, Admin: authLocalAdmin{}}
	// Live changes only to the running system's own root.
	if filepath.Clean(*root) == "/" {
		o.Hooks = firstboot.Hooks{
			SetHostname: func(name string) error { return syscall.Sethostname([]byte(name)) },
			StartSSH: func() error {
				out, err := exec.Command("systemctl", "start", "--no-block", "ssh.service").CombinedOutput()
				if err != nil {
					return fmt.Errorf("systemctl start ssh.service: %w: %s", err, strings.TrimSpace(string(out)))
				}
				return nil
			},
		}
	}
	if args[0] == "host-keys" {
		if _, err := firstboot.HostKeys(o); err != nil {
			fmt.Fprintln(stderr, "tabcast firstboot host-keys:", err)
			return 1
		}
		return 0
	}
	res, err := firstboot.Apply(o)
	for _, p := range res.Reapply {
		fmt.Fprintln(stdout, "tabcast firstboot: wrote", p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tabcast firstboot:", err)
		if errors.Is(err, firstboot.ErrRejected) {
			return 3
		}
		return 1
	}
	if !res.Found {
		fmt.Fprintf(stdout, "tabcast firstboot: no %s on %s; persisted settings re-applied\n", firstboot.FileName, *esp)
	}
	return 0
}

// authLocalAdmin hands the admin password hash to the auth-local plugin's
// own command (its users file and hash format are its business), on stdin
// so that it is never in a process list. The users file is written as the
// owner of its directory (the tabcast user the plugin runs as).
type authLocalAdmin struct{}

func (authLocalAdmin) Check(hash string) error {
	return runAuthLocal("check-hash", "", hash, "users", "check-hash")
}

func (authLocalAdmin) Set(usersFile, hash string) error {
	return runAuthLocal("set-hash", filepath.Dir(usersFile), hash, "users", "--file", usersFile, "set-hash", "admin", "--role", "admin")
}

func runAuthLocal(what, asOwnerOf, stdin string, args ...string) error {
	cfg, err := config.Load(config.Options{Defaults: defaultConfig, Environ: os.Environ()})
	if err != nil {
		cfg = &config.Config{} // the binary's own directory, as for a default config
	}
	dir, err := app.PluginsDir(cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(dir, "auth-local"), args...)
	cmd.Stdin = strings.NewReader(stdin + "\n")
	if st, err := os.Stat(asOwnerOf); asOwnerOf != "" && err == nil && os.Geteuid() == 0 {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sys.Uid, Gid: sys.Gid}}
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		// auth-local never prints the hash.
		return fmt.Errorf("auth-local users %s: %v: %s", what, err, strings.TrimSpace(string(out)))
	}
	return nil
}
