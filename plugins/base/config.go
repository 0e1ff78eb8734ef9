package base

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// DecodeStrict decodes a plugin config subtree into dst, refusing unknown
// keys and wrong types with a *ConfigError that names the key. Plugins call
// it from SetConfig so every plugin reports config errors the same way.
func DecodeStrict(configJSON []byte, dst any) error {
	if len(bytes.TrimSpace(configJSON)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(configJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case asType(err, &te):
			return &ConfigError{Key: te.Field, Message: fmt.Sprintf("wrong type: want %s, got %s", te.Type, te.Value)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			key := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &ConfigError{Key: key, Message: "unknown key"}
		default:
			return &ConfigError{Message: err.Error()}
		}
	}
	return nil
}

func asType(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*te = t
	}
	return ok
}

// Range returns a *ConfigError when v is outside [lo, hi].
func Range(key string, v, lo, hi int) error {
	if v < lo || v > hi {
		return &ConfigError{Key: key, Message: fmt.Sprintf("out of range: %d not in [%d, %d]", v, lo, hi)}
	}
	return nil
}
