package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/audit"
)

const tokensUsage = `usage:
  tabcast tokens list [config flags]
  tabcast tokens create NAME --user U [--role admin|operator|viewer] [--scopes read,control] [--ttl 720h] [config flags]
  tabcast tokens revoke ID [config flags]
The token file is <server.dataDir>/tokens.json; the running appliance sees
changes at once. A new token is printed once and never stored. Creating and
revoking are recorded in <server.dataDir>/audit.log as the API records them
(token.create, token.revoke; source "cli:<login>"); when that log cannot be
written, nothing is changed. Run as root, the files stay the owner's of
server.dataDir (the tabcast user).
`

// cmdTokens manages API tokens on this box (root or the tabcast user).
func cmdTokens(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, tokensUsage)
		return 2
	}
	sub, rest := args[0], args[1:]
	var arg string // NAME of create, ID of revoke
	if (sub == "create" || sub == "revoke") && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		arg, rest = rest[0], rest[1:]
	}
	var user, role, scopes, ttl string
	cfg, _, err := loadConfig("tokens "+sub, rest, stderr, func(fs *pflag.FlagSet) {
		if sub == "create" {
			fs.StringVar(&user, "user", "", "user the token acts as")
			fs.StringVar(&role, "role", string(access.RoleOperator), "role: admin, operator or viewer")
			fs.StringVar(&scopes, "scopes", "read,control", "comma-separated scopes: read, control, admin, cdp")
			fs.StringVar(&ttl, "ttl", "", `lifetime, e.g. "720h"; "" never expires`)
		}
	})
	if err != nil {
		printConfigError(stderr, err)
		return 2
	}
	tokensFile := filepath.Join(cfg.Server.DataDir, "tokens.json")
	tk, err := access.OpenTokens(tokensFile)
	if err != nil {
		fmt.Fprintln(stderr, "tabcast tokens:", err)
		return 1
	}
	// A change is audited like the API's (core/httpapi admin.go): the log
	// is opened first, so that no token is made or revoked unrecorded.
	var al *audit.Log
	if sub == "create" || sub == "revoke" {
		if al, err = openCLIAudit(cfg); err != nil {
			fmt.Fprintf(stderr, "tabcast tokens: %v; nothing was changed\n", err)
			return 1
		}
		defer al.Close()
		defer keepDataDirOwner(cfg, tokensFile, tokensFile+".lock")
	}
	record := func(rec audit.Record) {
		rec.Outcome, rec.Source = audit.OK, cliSource()
		if err := al.Add(rec); err != nil {
			fmt.Fprintf(stderr, "tabcast tokens: warning: audit log: %v\n", err)
		}
	}
	switch sub {
	case "list":
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tNAME\tUSER\tROLE\tSCOPES\tCREATED\tEXPIRES")
		for _, t := range tk.List() {
			exp := "never"
			if !t.Expires.IsZero() {
				exp = t.Expires.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.User, t.Role, strings.Join(t.Scopes, ","), t.Created.Format(time.RFC3339), exp)
		}
		_ = w.Flush()
		return 0
	case "create":
		if arg == "" || user == "" {
			fmt.Fprint(stderr, tokensUsage)
			return 2
		}
		var d time.Duration
		if ttl != "" {
			if d, err = time.ParseDuration(ttl); err != nil || d < time.Minute {
				fmt.Fprintf(stderr, "tabcast tokens: --ttl %q: want a duration of at least 1m\n", ttl)
				return 2
			}
		}
		r, ok := access.ParseRole(role)
		if !ok {
			fmt.Fprintf(stderr, "tabcast tokens: --role %q: want admin, operator or viewer\n", role)
			return 2
		}
		secret, info, err := tk.Create(arg, user, r, strings.Split(scopes, ","), d)
		if err != nil {
			fmt.Fprintln(stderr, "tabcast tokens:", err)
			return 1
		}
		// The same action and detail as the API's record; never the secret.
		record(audit.Record{Action: "token.create", Detail: "token " + info.ID + " for " + info.User + " (" + string(info.Role) + ")"})
		fmt.Fprintf(stderr, "token %s for %s (%s, %s); it is shown only now:\n", info.ID, info.User, info.Role, strings.Join(info.Scopes, ","))
		fmt.Fprintln(stdout, secret)
		return 0
	case "revoke":
		if arg == "" {
			fmt.Fprint(stderr, tokensUsage)
			return 2
		}
		info, ok, err := tk.Revoke(arg)
		if err != nil {
			fmt.Fprintln(stderr, "tabcast tokens:", err)
			return 1
		}
		if !ok {
			fmt.Fprintf(stderr, "tabcast tokens: no token %q\n", arg)
			return 1
		}
		record(audit.Record{Action: "token.revoke", Detail: "token " + info.ID})
		fmt.Fprintln(stdout, "revoked", arg)
		return 0
	}
	fmt.Fprint(stderr, tokensUsage)
	return 2
}

// openCLIAudit opens the appliance's audit log for appending.
func openCLIAudit(cfg *config.Config) (*audit.Log, error) {
	path := filepath.Join(cfg.Server.DataDir, "audit.log")
	_, statErr := os.Lstat(path)
	// No rotation from here (maxBytes 0): the running appliance holds the
	// file open and rotates it; a rotation by this process would leave it
	// writing to audit.log.1.
	l, err := audit.Open(path, 0)
	if err != nil {
		return nil, err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		keepDataDirOwner(cfg, path)
	}
	return l, nil
}

// cliSource is an audit record's source for a change made on the box.
func cliSource() string {
	if u, err := user.Current(); err == nil {
		return "cli:" + u.Username
	}
	return fmt.Sprintf("cli:uid %d", os.Geteuid())
}

// keepDataDirOwner gives files root just wrote in server.dataDir to the
// directory's owner (the tabcast user): a root-owned 0600 tokens.json,
// lock or audit log would lock the appliance out of its own files. Only
// plain files root owns, with one link, opened without following links,
// are changed, so nothing else can be handed over through them.
func keepDataDirOwner(cfg *config.Config, paths ...string) {
	if os.Geteuid() != 0 {
		return
	}
	st, err := os.Stat(cfg.Server.DataDir)
	if err != nil {
		return
	}
	dir, ok := st.Sys().(*syscall.Stat_t)
	if !ok || dir.Uid == 0 {
		return
	}
	for _, p := range paths {
		fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var fst syscall.Stat_t
		if syscall.Fstat(fd, &fst) == nil && fst.Mode&syscall.S_IFMT == syscall.S_IFREG && fst.Nlink == 1 && fst.Uid == 0 {
			_ = syscall.Fchown(fd, int(dir.Uid), int(dir.Gid))
		}
		syscall.Close(fd)
	}
}
