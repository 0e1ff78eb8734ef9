package plugins_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabcast/tabcast/plugins"
)

func TestBroken(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("plain"), false},
		{status.Error(codes.InvalidArgument, "refused"), false},
		{status.Error(codes.Unavailable, "gone"), true},
		{status.Error(codes.DeadlineExceeded, "hung"), true},
		{status.Error(codes.Aborted, "aborted"), true},
		{fmt.Errorf("encode: %w", status.Error(codes.Unavailable, "gone")), true},
	} {
		if got := plugins.Broken(tc.err); got != tc.want {
			t.Errorf("Broken(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
