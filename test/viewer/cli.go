package viewer

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
)

// BuildCLI builds cmd/tcviewer (the viewer as a program, to run inside a
// network namespace) into dir and returns its path. Go's build cache makes
// a second build cheap.
func BuildCLI(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "tcviewer")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/tabcast/tabcast/test/viewer/cmd/tcviewer").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tcviewer: %v\n%s", err, out)
	}
	return bin, nil
}

// DecodeCLI decodes what tcviewer printed.
func DecodeCLI(out []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("tcviewer output: %w", err)
	}
	return r, nil
}
