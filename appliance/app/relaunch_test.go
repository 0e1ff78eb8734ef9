package app

import (
	"slices"
	"testing"
)

func TestSwapFlags(t *testing.T) {
	all := []string{"--user", "--load-extension=/a", "--marker=1", "--spki=x"}
	old := []string{"--load-extension=/a", "--marker=1"}
	fresh := []string{"--load-extension=/b", "--marker=2"}
	if got, want := swapFlags(all, old, fresh), []string{"--user", "--load-extension=/b", "--marker=2", "--spki=x"}; !slices.Equal(got, want) {
		t.Errorf("swapFlags = %v, want %v", got, want)
	}
	if all[1] != "--load-extension=/a" {
		t.Error("swapFlags changed its input")
	}
	if got := swapFlags(all, []string{"--missing"}, fresh); !slices.Equal(got, all) {
		t.Errorf("swapFlags without the old run = %v", got)
	}
	if got := swapFlags([]string{"--user"}, nil, []string{"--new"}); !slices.Equal(got, []string{"--new", "--user"}) {
		t.Errorf("swapFlags with no old flags = %v", got)
	}
}
