package media

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/encoder"
)

func TestEncodeError(t *testing.T) {
	for _, code := range []string{errcode.BadFrame, errcode.OpenFailed, errcode.EncodeFailed, errcode.BadRequest} {
		sdk := &encoder.Error{Code: code, Message: "x"}
		err := encodeError(fmt.Errorf("encode: %w", sdk))
		if errcode.CodeOf(err) != code || !errcode.Known(code) || !errors.Is(err, sdk) {
			t.Errorf("%s: mapped to %v", code, err)
		}
	}
	plain := errors.New("plugin exited")
	if encodeError(plain) != plain {
		t.Error("an error without a code changed")
	}
}
