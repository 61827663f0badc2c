package artifact

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// docBlock is the first code block indented four spaces under the
// heading of docs/loop-artifacts.md, without its indent.
func docBlock(t *testing.T, doc, heading string) []byte {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/loop-artifacts.md has no heading %q", heading)
	}
	var b strings.Builder
	in := false
	for _, l := range strings.Split(after, "\n") {
		switch {
		case strings.HasPrefix(l, "    "):
			in = true
			b.WriteString(l[4:] + "\n")
		case in && strings.TrimSpace(l) == "":
			b.WriteString("\n")
		case in:
			return []byte(b.String())
		case strings.HasPrefix(l, "#"):
			t.Fatalf("docs/loop-artifacts.md has no example under %q", heading)
		}
	}
	return []byte(b.String())
}

// docs/loop-artifacts.md's example plan and spec parse as it says, and
// the refusals it quotes are the parsers' own words.
func TestDocsExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/loop-artifacts.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	p, err := ParsePlan(docBlock(t, doc, "### A plan"))
	if err != nil || !reflect.DeepEqual(p.Specs, []SpecItem{{"hello", "a file that says hello"}, {"bye", "a file that says goodbye"}}) {
		t.Fatalf("the docs' plan: %+v, %v", p, err)
	}
	s, err := ParseSpec(docBlock(t, doc, "### A spec"))
	if err != nil || len(s.Phases) != 2 || s.Phases[0].Name != "Write" || s.Phases[0].Description != "write greetings/hello.txt" ||
		s.Phases[1].Name != "Test" || !strings.Contains(s.Phases[1].Description, "\n(lines indented two spaces") {
		t.Fatalf("the docs' spec: %+v, %v", s, err)
	}
	if got := SpecPath(1, p.Specs[0].Name); !strings.Contains(doc, "writes `"+got+"`") {
		t.Errorf("the docs do not say the first spec writes %s", got)
	}
	if got := PhasePath(1, p.Specs[0].Name+" "+s.Phases[0].Name); !strings.Contains(doc, "writes `"+got+"`") {
		t.Errorf("the docs do not say the first phase writes %s", got)
	}
	unwrap := strings.Join(strings.Fields(doc), " ")
	head := "# P\n\n## Specs to Create\n"
	many := func(item func(i int) string) string {
		var b strings.Builder
		for i := range MaxItems + 1 {
			b.WriteString(item(i))
		}
		return b.String()
	}
	for _, c := range []struct {
		text  string
		plan  bool
		quote string // in the docs, and in the error
	}{
		{"# P\n", true, `the plan has no "## Specs to Create" section`},
		{head, true, `the plan's "## Specs to Create" section lists no spec`},
		{"# P\n\n## Specs to Create\n\n- spec-hello\n", true, `the plan's line 5 has no ':' after spec-hello: under a "## Specs to Create" heading, list each spec on its own line as "- spec-<name>: <description>", <name> in lowercase letters, digits and '-'`},
		{head + "- spec-Foo: x\n", true, `the plan's line 4: spec-Foo: a name may hold only lowercase letters, digits and '-'`},
		{head + "- spec-x:\n", true, `spec-x has no description`},
		{"# P\n## Specs to Create\n- spec-x: a\n- spec-x: b\n", true, `the plan lists spec-x twice (lines 3 and 4)`},
		{head + many(func(i int) string { return "- spec-s" + strconv.Itoa(i) + ": x\n" }), true, `the plan lists more than 100 specs`},
		{"# S\n", false, `the spec has no "## Phases" section`},
		{"## Phases\n", false, `the spec's "## Phases" section lists no phase`},
		{"## Phases\n1. **Write x\n", false, `the phase's name has no closing "**"`},
		{"# S\n## Phases\n1. **write** a\n2. **Write** b\n", false, `the spec names two phases "Write" (lines 3 and 4)`},
		{"## Phases\n1. **a*b** x\n", false, `a phase's name may not hold '*'`},
		{"## Phases\n" + many(func(i int) string { return "1. **P" + strconv.Itoa(i) + "** x\n" }), false, `the spec lists more than 100 phases`},
		{head + strings.Repeat("x", MaxArtifact+1), true, `larger than 1 MiB: write a shorter one`},
	} {
		var err error
		if c.plan {
			_, err = ParsePlan([]byte(c.text))
		} else {
			_, err = ParseSpec([]byte(c.text))
		}
		if err == nil || !strings.Contains(err.Error(), c.quote) {
			t.Errorf("%.60q: %v; want %q", c.text, err, c.quote)
		}
		if !strings.Contains(unwrap, c.quote) {
			t.Errorf("docs/loop-artifacts.md does not quote %q", c.quote)
		}
	}
}
