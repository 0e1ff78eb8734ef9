package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// kind is the type of a configuration key as the loader sees it.
type kind int

const (
	kSection    kind = iota // a struct: fixed set of child keys
	kString                 // string
	kBool                   // bool
	kInt                    // int
	kDuration               // time.Duration, written "20s"
	kStrings                // []string; comma-separated in env/flags
	kStringMap              // map[string]string (plugins.sha256): plugin name → value
	kPluginMaps             // map[string]map[string]any (plugins.config): plugin name → opaque subtree
)

func (k kind) want() string {
	switch k {
	case kSection:
		return "mapping"
	case kString:
		return "string"
	case kBool:
		return "boolean"
	case kInt:
		return "integer"
	case kDuration:
		return `duration (e.g. "2s", "500ms")`
	case kStrings:
		return "list of strings"
	case kStringMap:
		return "mapping of plugin name to string"
	case kPluginMaps:
		return "mapping of plugin name to mapping"
	}
	return "?"
}

// node is one key of the schema. The schema is derived from the Config struct
// by reflection so the two cannot drift apart.
type node struct {
	name     string // koanf tag
	path     string // full dotted path
	kind     kind
	index    []int // field index from Config
	children []*node
}

// boolishStrings are string keys whose allowed values include true/false:
// an unquoted YAML true/false there is accepted and stored as "true"/"false".
var boolishStrings = map[string]bool{"browser.noSandbox": true}

var schema = buildSchema()

func buildSchema() *node {
	root := &node{kind: kSection}
	buildSection(root, reflect.TypeFor[Config](), nil)
	return root
}

func buildSection(n *node, t reflect.Type, index []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		if tag == "" {
			continue
		}
		idx := append(append([]int(nil), index...), i)
		c := &node{name: tag, index: idx}
		if n.path == "" {
			c.path = tag
		} else {
			c.path = n.path + "." + tag
		}
		c.kind = kindOf(f.Type)
		if c.kind == kSection {
			buildSection(c, f.Type, idx)
		}
		n.children = append(n.children, c)
	}
}

func kindOf(t reflect.Type) kind {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return kDuration
	case t.Kind() == reflect.Struct:
		return kSection
	case t.Kind() == reflect.String:
		return kString
	case t.Kind() == reflect.Bool:
		return kBool
	case t.Kind() == reflect.Int:
		return kInt
	case t == reflect.TypeFor[[]string]():
		return kStrings
	case t == reflect.TypeFor[map[string]string]():
		return kStringMap
	case t == reflect.TypeFor[map[string]map[string]any]():
		return kPluginMaps
	}
	panic(fmt.Sprintf("config: unsupported field type %s", t)) // programming error, caught by every test
}

func (n *node) child(name string) *node {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (n *node) childFold(name string) *node {
	for _, c := range n.children {
		if strings.EqualFold(c.name, name) {
			return c
		}
	}
	return nil
}

// leaves returns every non-section node in declaration order.
func (n *node) leaves() []*node {
	var out []*node
	for _, c := range n.children {
		if c.kind == kSection {
			out = append(out, c.leaves()...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// layer is one source of configuration being normalized: the raw nested map
// a koanf provider produced, plus where each key came from.
type layer struct {
	// strings is true for env and flags: every leaf is a string that must be
	// converted to the key's type.
	strings bool
	// origin names the source of a path for error messages.
	origin func(path string) string
	errs   []error
	// set records every path this layer set (leaves and opaque subtrees) and
	// its origin, so later validation errors can say where a value came from.
	set map[string]string
}

func (l *layer) fail(path, format string, args ...any) {
	l.errs = append(l.errs, &KeyError{Key: path, Problem: fmt.Sprintf(format, args...), Source: l.origin(path)})
}

// normalize checks a raw layer against the schema and returns a map holding
// only known keys with values of the key's Go type. Bad keys are reported and
// dropped so the lower layers' values stay in effect for them.
func (l *layer) normalize(raw map[string]any) map[string]any {
	return l.section(schema, "", raw)
}

func (l *layer) section(n *node, prefix string, raw map[string]any) map[string]any {
	out := make(map[string]any, len(raw))
	for _, key := range sortedKeys(raw) {
		path := joinPath(prefix, key)
		c := n.child(key)
		if c == nil {
			l.unknown(n, path, key)
			continue
		}
		if v, ok := l.value(c, path, raw[key]); ok {
			out[key] = v
		}
	}
	return out
}

func (l *layer) unknown(n *node, path, key string) {
	switch {
	case n.childFold(key) != nil:
		l.fail(path, "unknown key (did you mean %s?)", n.childFold(key).path)
	case strings.Contains(key, "."):
		l.fail(path, "unknown key (dotted keys are not expanded in files: nest them)")
	default:
		l.fail(path, "unknown key")
	}
}

func (l *layer) value(c *node, path string, v any) (any, bool) {
	switch c.kind {
	case kSection:
		m, ok := l.mapping(c, path, v)
		if !ok {
			return nil, false
		}
		return l.section(c, path, m), true
	case kStringMap:
		m, ok := l.mapping(c, path, v)
		if !ok {
			return nil, false
		}
		out := make(map[string]any, len(m))
		for _, name := range sortedKeys(m) {
			p := joinPath(path, name)
			s, ok := m[name].(string)
			if !ok {
				l.fail(p, "wrong type: want string, got %s", describe(m[name]))
				continue
			}
			out[name] = s
			l.set[p] = l.origin(p)
		}
		return out, true
	case kPluginMaps:
		m, ok := l.mapping(c, path, v)
		if !ok {
			return nil, false
		}
		out := make(map[string]any, len(m))
		for _, name := range sortedKeys(m) {
			p := joinPath(path, name)
			sub := m[name]
			if sub == nil {
				sub = map[string]any{}
			}
			sm, ok := sub.(map[string]any)
			if !ok {
				l.fail(p, "wrong type: want mapping, got %s", describe(sub))
				continue
			}
			out[name] = l.opaque(p, sm).(map[string]any)
		}
		return out, true
	default:
		conv, err := convert(c, v, l.strings)
		if err != nil {
			l.fail(path, "%v", err)
			return nil, false
		}
		l.set[path] = l.origin(path)
		return conv, true
	}
}

func (l *layer) mapping(c *node, path string, v any) (map[string]any, bool) {
	switch m := v.(type) {
	case nil:
		return map[string]any{}, true
	case map[string]any:
		return m, true
	}
	l.fail(path, "wrong type: want %s, got %s", c.kind.want(), describe(v))
	return nil, false
}

// opaque deep-copies a plugin subtree, turning YAML's map[any]any into
// map[string]any and, for env/flag layers, string leaves into typed scalars.
func (l *layer) opaque(path string, v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		folded := make(map[string]string, len(t))
		for _, k := range sortedKeys(t) {
			// Plugins decode JSON, which matches keys case-insensitively:
			// two spellings of one key would make one silently lose.
			if prev, dup := folded[strings.ToLower(k)]; dup {
				l.fail(joinPath(path, k), "same key as %s (plugins match key names case-insensitively)", prev)
				continue
			}
			folded[strings.ToLower(k)] = k
			out[k] = l.opaque(joinPath(path, k), t[k])
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, sv := range t {
			ks := fmt.Sprint(k)
			out[ks] = l.opaque(joinPath(path, ks), sv)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, sv := range t {
			out[i] = l.opaque(path, sv)
		}
		return out
	case string:
		l.set[path] = l.origin(path)
		if l.strings {
			return inferScalar(t)
		}
		return t
	default:
		l.set[path] = l.origin(path)
		return t
	}
}

// inferScalar types a plugin value given as a string in env or --set: the
// plugins decode JSON strictly, so "60" must reach them as a number.
// true/false become booleans, integers and decimals become numbers,
// everything else stays a string (to force a string, use the config file).
func inferScalar(s string) any {
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	if i, err := strconv.Atoi(s); err == nil {
		return i
	}
	if looksDecimal(s) {
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) {
			return f
		}
	}
	return s
}

// looksDecimal accepts -?digits[.digits][e±digits] and nothing else, so
// ParseFloat's "inf", "nan" and hex forms stay strings.
func looksDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, hasFrac := strings.Cut(mant, ".")
	if !digits(intPart) || (hasFrac && !digits(frac)) {
		return false
	}
	if hasExp {
		exp = strings.TrimLeft(exp, "+-")
		return digits(exp)
	}
	return true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// convert turns a raw value into the Go type of a leaf key.
func convert(c *node, v any, fromString bool) (any, error) {
	if fromString {
		s, ok := v.(string)
		if !ok {
			// Only sections produce non-strings here (a key path that stops
			// at a section); report it as such.
			return nil, fmt.Errorf("wrong type: want %s, got %s", c.kind.want(), describe(v))
		}
		return convertString(c, s)
	}
	bad := fmt.Errorf("wrong type: want %s, got %s", c.kind.want(), describe(v))
	switch c.kind {
	case kString:
		if s, ok := v.(string); ok {
			return s, nil
		}
		if b, ok := v.(bool); ok && boolishStrings[c.path] {
			return strconv.FormatBool(b), nil
		}
		return nil, bad
	case kBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, bad
	case kInt:
		switch n := v.(type) {
		case int:
			return n, nil
		case int64:
			if n >= math.MinInt && n <= math.MaxInt {
				return int(n), nil
			}
		case uint64:
			if n <= math.MaxInt {
				return int(n), nil
			}
		}
		return nil, bad
	case kDuration:
		s, ok := v.(string)
		if !ok {
			return nil, bad
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, bad
		}
		return d, nil
	case kStrings:
		list, ok := v.([]any)
		if v == nil {
			return []string{}, nil
		}
		if !ok {
			return nil, bad
		}
		out := make([]string, 0, len(list))
		for i, item := range list {
			s, ok := item.(string)
			if !ok {
				return nil, fmt.Errorf("wrong type: item %d: want string, got %s", i, describe(item))
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, bad
}

func convertString(c *node, s string) (any, error) {
	bad := fmt.Errorf("wrong type: want %s, got %q", c.kind.want(), s)
	switch c.kind {
	case kString:
		return s, nil
	case kBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, bad
		}
		return b, nil
	case kInt:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, bad
		}
		return n, nil
	case kDuration:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, bad
		}
		return d, nil
	case kStrings:
		out := []string{}
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
		return out, nil
	}
	return nil, bad
}

// describe renders a raw value for a "got ..." message.
func describe(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(t)
	case map[string]any, map[any]any:
		return "mapping"
	case []any:
		return "list"
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64)
	case time.Time:
		return "timestamp " + t.Format(time.RFC3339)
	default:
		return fmt.Sprintf("%v", t)
	}
}
