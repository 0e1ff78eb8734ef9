package media

import (
	"errors"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// encodeError maps the encoder SDK's error to the core's vocabulary at the
// edge where the core calls the plugin: the SDK keeps its own Error type
// because plugins never import core, and its codes (bad_frame,
// open_failed, encode_failed, bad_request) are errcode constants. Any other
// error (a broken plugin, a closed stream) passes unchanged.
func encodeError(err error) error {
	var ee *encoder.Error
	if errors.As(err, &ee) {
		return errcode.Wrap(ee.Code, err, ee.Message)
	}
	return err
}
