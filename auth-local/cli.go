package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tabcast/tabcast/auth-local/users"
)

const usersUsage = `usage: auth-local users [--file FILE] COMMAND
  list
  add NAME [--role admin|operator|viewer] [--password-stdin]
  passwd NAME [--password-stdin]
  del NAME
  set-hash NAME [--role admin|operator|viewer]   (an argon2id hash on stdin; no forced change)
  check-hash                                    (is the hash on stdin one this store accepts?)
Without --password-stdin a random password is generated, printed once, and
must be changed at the first login.
`

// usersCommand manages the users file. Passwords come from stdin (one
// line) or are generated; they are printed only when generated.
func usersCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("users", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", users.DefaultConfig().UsersFile, "users file")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fmt.Fprint(stderr, usersUsage)
		return 2
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	// One line from stdin: a password or a hash, never an argument (ps).
	stdinLine := func() (string, error) {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	if cmd == "check-hash" {
		h, err := stdinLine()
		if err == nil {
			err = users.CheckHash(h)
		}
		if err != nil {
			fmt.Fprintln(stderr, "auth-local users: check-hash:", err)
			return 1
		}
		return 0
	}
	store, err := users.Open(*file)
	if err != nil {
		fmt.Fprintln(stderr, "auth-local users:", err)
		return 1
	}
	sub := flag.NewFlagSet(cmd, flag.ContinueOnError)
	sub.SetOutput(stderr)
	role := sub.String("role", users.RoleOperator, "role: admin, operator or viewer")
	fromStdin := sub.Bool("password-stdin", false, "read the password from stdin")
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := sub.Parse(rest); err != nil {
		return 2
	}
	password := func() (string, bool, error) {
		if *fromStdin {
			line, err := stdinLine()
			return line, false, err
		}
		p, err := users.RandomPassword(20)
		return p, true, err
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "auth-local users:", err)
		return 1
	}
	switch cmd {
	case "list":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tROLE\tMUST CHANGE PASSWORD")
		for _, u := range store.List() {
			fmt.Fprintf(tw, "%s\t%s\t%v\n", u.Name, u.Role, u.MustChangePassword)
		}
		_ = tw.Flush()
		return 0
	case "add", "passwd":
		if name == "" {
			fmt.Fprint(stderr, usersUsage)
			return 2
		}
		p, generated, err := password()
		if err != nil {
			return fail(err)
		}
		if cmd == "add" {
			err = store.Add(name, p, *role)
			if err == nil && generated {
				err = store.SetPassword(name, p, true)
			}
		} else {
			err = store.SetPassword(name, p, generated)
		}
		if err != nil {
			return fail(err)
		}
		if generated {
			fmt.Fprintf(stdout, "password for %s (shown once; to be changed at the first login): %s\n", name, p)
		} else {
			fmt.Fprintf(stdout, "%s: password set\n", name)
		}
		return 0
	case "set-hash":
		if name == "" {
			fmt.Fprint(stderr, usersUsage)
			return 2
		}
		h, err := stdinLine()
		if err == nil {
			err = store.SetHash(name, *role, h)
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: password hash set\n", name)
		return 0
	case "del":
		if name == "" {
			fmt.Fprint(stderr, usersUsage)
			return 2
		}
		if err := store.Delete(name); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: deleted\n", name)
		return 0
	}
	fmt.Fprint(stderr, usersUsage)
	return 2
}
