package config

import (
	"reflect"
	"sort"
)

// Changed lists the keys whose values differ between a and b, in dotted
// form ("video.bitrateKbps"); a plugin's config subtree counts as one key
// ("plugins.config.encoder-ffmpeg"). Secret values never appear, only keys.
func Changed(a, b *Config) []string {
	var out []string
	diffValue("", reflect.ValueOf(*a), reflect.ValueOf(*b), &out)
	sort.Strings(out)
	return out
}

func diffValue(path string, a, b reflect.Value, out *[]string) {
	if a.Kind() == reflect.Struct {
		t := a.Type()
		for i := range t.NumField() {
			name := t.Field(i).Tag.Get("koanf")
			if name == "" {
				continue
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			diffValue(p, a.Field(i), b.Field(i), out)
		}
		return
	}
	if a.Kind() == reflect.Map && a.Type().Elem().Kind() == reflect.Map {
		// plugins.config: one key per plugin.
		names := map[string]bool{}
		for _, k := range a.MapKeys() {
			names[k.String()] = true
		}
		for _, k := range b.MapKeys() {
			names[k.String()] = true
		}
		for n := range names {
			av, bv := a.MapIndex(reflect.ValueOf(n)), b.MapIndex(reflect.ValueOf(n))
			if av.IsValid() != bv.IsValid() || av.IsValid() && !reflect.DeepEqual(av.Interface(), bv.Interface()) {
				*out = append(*out, path+"."+n)
			}
		}
		return
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		*out = append(*out, path)
	}
}
