package plugins_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/plugins"
)

// TestCatalogMatchesBuildFiles: the plugin list is written in the Makefile
// and the image scripts too (shell and a Containerfile cannot import Go);
// every copy must name exactly the catalog's binaries, in its order. The
// test harness takes its list from plugins.Bundled.
func TestCatalogMatchesBuildFiles(t *testing.T) {
	want := plugins.Bundled()
	for _, c := range []struct {
		file string
		re   *regexp.Regexp // group 1: the list
		sep  string
		trim string // prefix of each element
	}{
		{"Makefile", regexp.MustCompile(`(?m)^PLUGINS := (.*)$`), " ", ""},
		{"image/build.sh", regexp.MustCompile(`for b in tabcast ([^;]*); do`), " ", ""},
		{"image/customize.sh", regexp.MustCompile(`for b in tabcast ([^;]*); do`), " ", ""},
		{"image/test.sh", regexp.MustCompile(`for b in tabcast ([^;]*); do`), " ", ""},
		{"image/test.sh", regexp.MustCompile(`\{tabcast,([^}]*)\}`), ",", ""},
		{"image/README.md", regexp.MustCompile(`\{tabcast,([^}]*)\}`), ",", ""},
		{"image/Containerfile", regexp.MustCompile(`COPY bin/tabcast (.*) /usr/lib/tabcast/`), " ", "bin/"},
	} {
		b, err := os.ReadFile(filepath.Join("..", c.file))
		if err != nil {
			t.Fatal(err)
		}
		ms := c.re.FindAllStringSubmatch(string(b), -1)
		if len(ms) == 0 {
			t.Errorf("%s: no plugin list matching %s (moved? update this test)", c.file, c.re)
		}
		for _, m := range ms {
			var got []string
			for _, f := range strings.Split(m[1], c.sep) {
				if f = strings.TrimPrefix(strings.TrimSpace(f), c.trim); f != "" {
					got = append(got, f)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s lists plugins %q, the catalog (plugins/catalog.go) %q", c.file, got, want)
			}
		}
	}
}

func TestCatalogRoles(t *testing.T) {
	names, keys := map[string]bool{}, map[string]bool{}
	for _, s := range plugins.Catalog() {
		if names[s.Name] || keys[s.ConfigKey] {
			t.Errorf("role %+v: name or config key used twice", s)
		}
		names[s.Name], keys[s.ConfigKey] = true, true
		if !slices.Contains(plugins.Kinds(), s.Kind) {
			t.Errorf("role %+v: unknown kind", s)
		}
		if _, err := os.Stat(filepath.Join("..", s.Name, "main.go")); err != nil {
			t.Errorf("role %+v: no main package in the repository: %v", s, err)
		}
	}
}
