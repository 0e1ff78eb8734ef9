package cli

import (
	"fmt"
	"io"

	"github.com/tabcast/tabcast/appliance/config"
)

// cmdConfig is `tabcast config check|print`: the layered configuration,
// validated, and printed with secrets masked.
func cmdConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "check" && args[0] != "print") {
		fmt.Fprint(stderr, "usage: tabcast config check|print [--config FILE] [--set key=value]...\n")
		return 2
	}
	cfg, _, err := loadConfig("config "+args[0], args[1:], stderr, nil)
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	if args[0] == "check" {
		fmt.Fprintln(stdout, "config ok")
		return 0
	}
	if err := config.Print(stdout, cfg); err != nil {
		fmt.Fprintln(stderr, "tabcast:", err)
		return 1
	}
	return 0
}
