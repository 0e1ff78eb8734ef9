package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTable: every argument of the command table lands in a field of
// Request (a typo in a key or a Field would be dropped silently by the
// JSON decoder), names and tools are unique, and a flag shared by several
// commands has one type.
func TestTable(t *testing.T) {
	names, tools, flags := map[string]bool{}, map[string]bool{}, map[string]ArgType{}
	for _, c := range Table {
		if names[c.Name] {
			t.Errorf("command %s twice", c.Name)
		}
		names[c.Name] = true
		if c.Tool != "" {
			if tools[c.Tool] || c.Title == "" || len(c.Help) < 20 {
				t.Errorf("%s: tool %q twice or without title and help", c.Name, c.Tool)
			}
			tools[c.Tool] = true
		}
		for _, a := range c.AllArgs() {
			if a.Help == "" && c.Tool != "" {
				t.Errorf("%s.%s: no help", c.Name, a.Key)
			}
			if a.Flag != "" {
				if typ, ok := flags[a.Flag]; ok && typ != a.Type {
					t.Errorf("flag --%s is %s and %s", a.Flag, typ, a.Type)
				}
				flags[a.Flag] = a.Type
			}
			var v any
			switch a.Type {
			case String:
				v = "v"
			case Bool:
				v = true
			case Int, Number, OptInt, OptNum:
				v = 3.0
			case Strings:
				v = []any{"a"}
			default:
				t.Errorf("%s.%s: type %q", c.Name, a.Key, a.Type)
				continue
			}
			m := map[string]any{"command": c.Name}
			a.Set(m, v)
			r, err := RequestOf(m)
			if err != nil {
				t.Errorf("%s.%s: %v", c.Name, a.Key, err)
				continue
			}
			if a.Switch != "" {
				if _, ok := Lookup(a.Switch); !ok || r.Command != a.Switch {
					t.Errorf("%s.%s: switch to %q gave %q", c.Name, a.Key, a.Switch, r.Command)
				}
				continue
			}
			field := a.Field
			if field == "" {
				field = a.Key
			}
			var back map[string]any
			b, _ := json.Marshal(r)
			_ = json.Unmarshal(b, &back)
			parts := strings.Split(field, ".")
			for _, p := range parts[:len(parts)-1] {
				back, _ = back[p].(map[string]any)
			}
			if back[parts[len(parts)-1]] == nil {
				t.Errorf("%s.%s: %s is not a field of Request", c.Name, a.Key, field)
			}
		}
	}
	if len(Commands) != len(Table) || !reads["snapshot"] || reads["click"] {
		t.Errorf("Commands %v, reads %v", Commands, reads)
	}
	if c, ok := Lookup("GOTO"); !ok || c.Name != "navigate" {
		t.Errorf("Lookup(GOTO) = %v, %v", c, ok)
	}
}
