package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/core/access"
)

const tokensUsage = `usage:
  tabcast tokens list [config flags]
  tabcast tokens create NAME --user U [--role admin|operator|viewer] [--scopes read,control] [--ttl 720h] [config flags]
  tabcast tokens revoke ID [config flags]
The token file is <server.dataDir>/tokens.json; the running appliance sees
changes at once. A new token is printed once and never stored.
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
			fs.StringVar(&scopes, "scopes", "read,control", "comma-separated scopes: read, control, admin")
			fs.StringVar(&ttl, "ttl", "", `lifetime, e.g. "720h"; "" never expires`)
		}
	})
	if err != nil {
		printConfigError(stderr, err)
		return 2
	}
	tk, err := access.OpenTokens(filepath.Join(cfg.Server.DataDir, "tokens.json"))
	if err != nil {
		fmt.Fprintln(stderr, "tabcast tokens:", err)
		return 1
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
		fmt.Fprintf(stderr, "token %s for %s (%s, %s); it is shown only now:\n", info.ID, info.User, info.Role, strings.Join(info.Scopes, ","))
		fmt.Fprintln(stdout, secret)
		return 0
	case "revoke":
		if arg == "" {
			fmt.Fprint(stderr, tokensUsage)
			return 2
		}
		_, ok, err := tk.Revoke(arg)
		if err != nil {
			fmt.Fprintln(stderr, "tabcast tokens:", err)
			return 1
		}
		if !ok {
			fmt.Fprintf(stderr, "tabcast tokens: no token %q\n", arg)
			return 1
		}
		fmt.Fprintln(stdout, "revoked", arg)
		return 0
	}
	fmt.Fprint(stderr, tokensUsage)
	return 2
}
