package plugins_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates every plugin proto into a temporary
// directory and compares it with the committed code: editing a .proto
// without `make proto` fails here.
func TestGeneratedCodeIsFresh(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Fatalf("protoc not found (make deps installs protobuf-compiler): %v", err)
	}
	tool := func(name string) string {
		out, err := exec.Command("go", "tool", "-n", name).Output()
		if err != nil {
			t.Fatalf("go tool -n %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	genGo, genGRPC := tool("protoc-gen-go"), tool("protoc-gen-go-grpc")
	for _, kind := range []string{"base", "capture", "encoder", "auth", "turn"} {
		t.Run(kind, func(t *testing.T) {
			src := filepath.Join(kind, "proto")
			tmp := t.TempDir()
			cmd := exec.Command(protoc, "-I", src,
				"--plugin=protoc-gen-go="+genGo, "--plugin=protoc-gen-go-grpc="+genGRPC,
				"--go_out=paths=source_relative:"+tmp, "--go-grpc_out=paths=source_relative:"+tmp,
				filepath.Join(src, kind+".proto"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("protoc: %v\n%s", err, out)
			}
			for _, f := range []string{kind + ".pb.go", kind + "_grpc.pb.go"} {
				want, err := os.ReadFile(filepath.Join(tmp, f))
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(src, f))
				if err != nil {
					t.Fatalf("committed %s missing: %v (run make proto)", f, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s/%s is stale: run `make proto` and commit the result", src, f)
				}
			}
		})
	}
}
