package approvals

import (
	"reflect"
	"testing"
)

// The parts of a few commands, as a rule reads them.
func TestSplitShell(t *testing.T) {
	for _, c := range []struct {
		cmd    string
		parts  []string
		opaque string
	}{
		{"git status", []string{"git status"}, ""},
		{"a && b || c | d |& e ; f & g\nh", []string{"a", "b", "c", "d", "e", "f", "g", "h"}, ""},
		{"git  log   --format='a;b' 2>&1 >/dev/null", []string{"git log --format='a;b'"}, ""},
		{"a \\\nb \"c\\\nd\" 'e\\\nf'", []string{"a b \"cd\" 'e\\\nf'"}, ""},
		{"a $(b; c `d`) e", []string{"b", "d", "c `d`", "a $(b; c `d`) e"}, "a command substitution"},
		{"(a; b) && c", []string{"a", "b", "c"}, "a subshell"},
		{"a > f", []string{"a"}, "a redirection to a file"},
		{"X=1 a", []string{"X=1 a"}, "an assignment before the command"},
		{"a # b; c", []string{"a"}, "a comment"},
		{"if a; then b; fi", []string{"if a", "then b", "fi"}, "the shell keyword if"},
	} {
		sh := splitShell(c.cmd)
		var texts []string
		for _, p := range sh.parts {
			texts = append(texts, p.text())
		}
		if sh.err != nil || !reflect.DeepEqual(texts, c.parts) || sh.opaque != c.opaque {
			t.Errorf("%q: parts %q, opaque %q, err %v; want %q, %q", c.cmd, texts, sh.opaque, sh.err, c.parts, c.opaque)
		}
	}
	if sh := splitShell("X=1 if a"); len(sh.parts) != 1 || sh.parts[0].command() != "a" {
		t.Errorf("command() of %q: %q", "X=1 if a", sh.parts)
	}
}

// FuzzSplitShell: the splitter never panics, and the parts of a command
// it vouches for read back as themselves.
func FuzzSplitShell(f *testing.F) {
	for _, c := range bashCases {
		f.Add(c.cmd)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sh := splitShell(s)
		if sh.err != nil || sh.opaque != "" {
			return
		}
		for _, p := range sh.parts {
			again := splitShell(p.text())
			if again.err != nil || again.opaque != "" || len(again.parts) != 1 || again.parts[0].text() != p.text() {
				t.Fatalf("%q: part %q reads back as %q (opaque %q, err %v)", s, p.text(), again.parts, again.opaque, again.err)
			}
		}
	})
}
