// Command testcore is a stand-in for the core in the supervisor's tests: it
// starts the plugins given as arguments, prints "PIDS <pid>..." and waits
// to be killed.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	s := supervisor.New(supervisor.Options{Logger: log})
	var pids []string
	for i, path := range os.Args[1:] {
		h, err := s.Start(context.Background(), supervisor.Spec{
			Name: fmt.Sprintf("%s-%d", filepath.Base(path), i), Kind: plugins.KindCapture, Path: path,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "start:", err)
			os.Exit(2)
		}
		pids = append(pids, fmt.Sprint(h.Status().PID))
	}
	fmt.Println("PIDS " + strings.Join(pids, " "))
	select {} // until SIGKILL
}
