package errcode

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"strconv"
	"testing"
)

// constants returns every string constant of the package, by name, read
// from its source so that a new constant cannot escape the check.
func constants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, pkg := range pkgs {
		if name != "errcode" {
			continue
		}
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Fatalf("constant %s is not a string literal: every code is written out once", id.Name)
						}
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out[id.Name] = v
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no constants found")
	}
	return out
}

func TestEveryCodeHasAnEntry(t *testing.T) {
	consts := constants(t)
	byValue := map[string]string{}
	for name, v := range consts {
		if other, dup := byValue[v]; dup {
			t.Errorf("%s and %s are both %q: define a code once", name, other, v)
		}
		byValue[v] = name
		if _, ok := table[v]; !ok {
			t.Errorf("%s (%q) has no entry in table", name, v)
		}
	}
	for code := range table {
		if _, ok := byValue[code]; !ok {
			t.Errorf("table entry %q is not a constant", code)
		}
	}
	for code, e := range table {
		if e.status < 400 || e.status > 599 {
			t.Errorf("%q: status %d is not an error status", code, e.status)
		}
	}
}

func TestErrorChain(t *testing.T) {
	cause := errors.New("dial: connection refused")
	e := Wrap(BrowserUnavailable, cause, "the browser is not available")
	wrapped := fmt.Errorf("create: %w", e)
	if !errors.Is(wrapped, cause) {
		t.Fatal("the cause is not in the chain")
	}
	if !errors.Is(wrapped, New(BrowserUnavailable, "")) {
		t.Fatal("Is does not match by code")
	}
	if errors.Is(wrapped, New(NotReady, "")) {
		t.Fatal("Is matched another code")
	}
	if CodeOf(wrapped) != BrowserUnavailable || CodeOf(cause) != "" {
		t.Fatal("CodeOf")
	}
	if !e.Recoverable || HTTPStatus(e.Code) != http.StatusServiceUnavailable {
		t.Fatal("the table was not applied")
	}
}

func TestFrom(t *testing.T) {
	own := New(StaleRef, "ref e1 is stale")
	if From(fmt.Errorf("click: %w", own)) != own {
		t.Fatal("an *Error does not pass through")
	}
	if e := From(fmt.Errorf("eval: %w", context.DeadlineExceeded)); e.Code != Timeout || !e.Recoverable {
		t.Fatalf("deadline: %+v", e)
	}
	e := From(errors.New("/var/lib/tabcast: permission denied"))
	if e.Code != Internal || e.Message != "internal error" || e.Hint == "" {
		t.Fatalf("internal: %+v", e)
	}
	if HTTPStatus("no_such_code") != http.StatusInternalServerError || Known("no_such_code") {
		t.Fatal("an unknown code")
	}
}
