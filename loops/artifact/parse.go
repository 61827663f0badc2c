package artifact

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Headings of the sections the parsers read.
const (
	SpecsHeading  = "## Specs to Create"
	PhasesHeading = "## Phases"
)

// SpecItem is one spec a plan lists: "- spec-<name>: description".
type SpecItem struct {
	Name        string // <name>, without "spec-": lowercase letters, digits, '-'
	Description string // one line
}

// Plan is what a plan lists.
type Plan struct {
	Specs []SpecItem
}

// PhaseItem is one phase a spec lists: "N. **Name** - description".
type PhaseItem struct {
	Number      int    // its position in the list, from 1 (the numbers written are not kept)
	Name        string // as written between the ** (no '*')
	Description string // the item's text, and its indented continuation lines after "\n"
}

// Spec is what a spec lists.
type Spec struct {
	Phases []PhaseItem
}

// ErrTooLarge is an artifact over MaxArtifact.
var ErrTooLarge = errors.New("larger than 1 MiB")

const (
	maxName      = 64 // a spec's name
	maxPhaseName = 100
	maxDesc      = 4096 // a description
)

// line is one line of an artifact outside fenced code blocks.
type line struct {
	n    int    // 1-based
	text string // without the line end
}

// lines splits b into lines, dropping fenced code blocks (``` or ~~~
// fences indented at most 3 spaces) so an example in one is not read.
func lines(b []byte) []line {
	var out []line
	fence := ""
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSuffix(l, "\r")
		if f := fenceOf(l); f != "" && (fence == "" || fence == f) {
			if fence == "" {
				fence = f
			} else {
				fence = ""
			}
			continue
		}
		if fence == "" {
			out = append(out, line{n: i + 1, text: l})
		}
	}
	return out
}

// fenceOf is the fence a line opens or closes ("```", "~~~"), or "".
func fenceOf(l string) string {
	t := strings.TrimLeft(l, " ")
	if len(l)-len(t) > 3 {
		return ""
	}
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, f) {
			return f
		}
	}
	return ""
}

// heading returns a line's heading level (0: not a heading) and text.
func heading(l string) (int, string) {
	t := strings.TrimLeft(l, " ")
	if len(l)-len(t) > 3 {
		return 0, ""
	}
	lv := 0
	for lv < len(t) && t[lv] == '#' {
		lv++
	}
	if lv == 0 || lv > 6 || (lv < len(t) && t[lv] != ' ' && t[lv] != '\t') {
		return 0, ""
	}
	return lv, strings.TrimSpace(strings.TrimRight(strings.TrimSpace(t[lv:]), "#"))
}

// section returns the lines under the first level-2 heading named name
// (case and spacing aside), up to the next heading of level 1 or 2.
func section(ls []line, name string) ([]line, bool) {
	want := strings.ToLower(strings.Join(strings.Fields(strings.TrimPrefix(name, "## ")), " "))
	for i, l := range ls {
		lv, txt := heading(l.text)
		if lv != 2 || strings.ToLower(strings.Join(strings.Fields(txt), " ")) != want {
			continue
		}
		var out []line
		for _, m := range ls[i+1:] {
			if lv, _ := heading(m.text); lv == 1 || lv == 2 {
				break
			}
			out = append(out, m)
		}
		return out, true
	}
	return nil, false
}

func check(b []byte) error {
	if len(b) > MaxArtifact {
		return fmt.Errorf("it is %d bytes, %w: write a shorter one", len(b), ErrTooLarge)
	}
	return nil
}

// clean makes a description one valid UTF-8 string without control
// characters (tabs become spaces), bounded.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	return clean2(strings.TrimSpace(s))
}

const planFormat = `under a "` + SpecsHeading + `" heading, list each spec on its own line as "- spec-<name>: <description>", <name> in lowercase letters, digits and '-'`

// ParsePlan reads the specs a plan lists under "## Specs to Create"
// (until the next "# " or "## " heading; fenced code blocks skipped):
// each "- spec-<name>: description" line (the marker may be -, * or +;
// the spec-<name> may be in ** or `), in order. Other lines are prose.
// An error says what is wrong and what is expected, for the agent.
func ParsePlan(b []byte) (Plan, error) {
	if err := check(b); err != nil {
		return Plan{}, fmt.Errorf("the plan: %w", err)
	}
	sec, ok := section(lines(b), SpecsHeading)
	if !ok {
		return Plan{}, fmt.Errorf("the plan has no %q section: %s", SpecsHeading, planFormat)
	}
	var p Plan
	seen := map[string]int{}
	for _, l := range sec {
		t := strings.TrimLeft(l.text, " ")
		if len(l.text)-len(t) > 3 || len(t) < 2 || !strings.ContainsRune("-*+", rune(t[0])) || (t[1] != ' ' && t[1] != '\t') {
			continue
		}
		content := strings.TrimSpace(t[2:])
		tok, desc, hasColon := strings.Cut(content, ":")
		tok = strings.TrimSpace(tok)
		for _, m := range []string{"**", "`", "*"} {
			if strings.HasPrefix(tok, m) {
				tok = tok[len(m):]
				if strings.HasSuffix(tok, m) {
					tok = tok[:len(tok)-len(m)]
				} else {
					desc = strings.TrimPrefix(strings.TrimSpace(desc), m)
				}
				break
			}
		}
		if !strings.HasPrefix(strings.ToLower(tok), "spec-") {
			continue
		}
		name := tok[len("spec-"):]
		if !hasColon {
			return Plan{}, fmt.Errorf("the plan's line %d has no ':' after spec-%s: %s", l.n, clean(name), planFormat)
		}
		if err := validName(name); err != nil {
			return Plan{}, fmt.Errorf("the plan's line %d: %w: %s", l.n, err, planFormat)
		}
		if prev, dup := seen[name]; dup {
			return Plan{}, fmt.Errorf("the plan lists spec-%s twice (lines %d and %d): give each spec a different name", name, prev, l.n)
		}
		desc = clean(desc)
		if desc == "" {
			return Plan{}, fmt.Errorf("the plan's line %d: spec-%s has no description: %s", l.n, name, planFormat)
		}
		if len(p.Specs) == MaxItems {
			return Plan{}, fmt.Errorf("the plan lists more than %d specs: list at most %d", MaxItems, MaxItems)
		}
		seen[name] = l.n
		p.Specs = append(p.Specs, SpecItem{Name: name, Description: desc})
	}
	if len(p.Specs) == 0 {
		return Plan{}, fmt.Errorf("the plan's %q section lists no spec: %s", SpecsHeading, planFormat)
	}
	return p, nil
}

// validName: a spec's name is 1 to 64 of [a-z0-9], '-' between them.
func validName(name string) error {
	if name == "" {
		return errors.New(`a spec's name is empty ("spec-" alone)`)
	}
	if len(name) > maxName {
		return fmt.Errorf("a spec's name is longer than %d characters", maxName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("spec-%s: a name may hold only lowercase letters, digits and '-'", clean(name))
		}
	}
	if name[0] == '-' || name[len(name)-1] == '-' || strings.Contains(name, "--") {
		return fmt.Errorf("spec-%s: a name may not start or end with '-' nor hold \"--\"", name)
	}
	return nil
}

// Markdown writes the plan's section as ParsePlan reads it.
func (p Plan) Markdown() []byte {
	var b strings.Builder
	b.WriteString(SpecsHeading + "\n\n")
	for _, s := range p.Specs {
		b.WriteString("- spec-" + s.Name + ": " + s.Description + "\n")
	}
	return []byte(b.String())
}

const specFormat = `under a "` + PhasesHeading + `" heading, number each phase with its name in bold: "1. **Name** - <description>", one name per phase, without '*'`

// ParseSpec reads the phases a spec lists under "## Phases" (until the
// next "# " or "## " heading; fenced code blocks skipped): each numbered
// item whose text starts with a **Name** ("1. **Setup** - text", "2)
// **Build**: text", "3. **Test:** text"), indented at most one space, in
// order; lines indented two spaces or more after an item continue its
// description. An error says what is wrong and what is expected.
func ParseSpec(b []byte) (Spec, error) {
	if err := check(b); err != nil {
		return Spec{}, fmt.Errorf("the spec: %w", err)
	}
	sec, ok := section(lines(b), PhasesHeading)
	if !ok {
		return Spec{}, fmt.Errorf("the spec has no %q section: %s", PhasesHeading, specFormat)
	}
	var s Spec
	seen := map[string]int{}
	cur := -1 // the phase continuation lines go to
	for _, l := range sec {
		t := strings.TrimLeft(l.text, " \t")
		indent := len(l.text) - len(t)
		if t == "" {
			cur = -1
			continue
		}
		if indent >= 2 {
			if cur >= 0 && len(s.Phases[cur].Description) < maxDesc {
				if c := clean(t); c != "" {
					d := s.Phases[cur].Description
					if d != "" {
						d += "\n"
					}
					s.Phases[cur].Description = clean2(d + c)
				}
			}
			continue
		}
		cur = -1
		if lv, _ := heading(l.text); lv > 0 {
			continue
		}
		num, rest, ok := numbered(t)
		if !ok {
			continue
		}
		_ = num
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, "**") {
			continue
		}
		end := strings.Index(rest[2:], "**")
		if end < 0 {
			return Spec{}, fmt.Errorf("the spec's line %d: the phase's name has no closing \"**\": %s", l.n, specFormat)
		}
		name := strings.TrimSpace(rest[2 : 2+end])
		desc := rest[2+end+2:]
		if strings.HasSuffix(name, ":") {
			name = strings.TrimSpace(strings.TrimSuffix(name, ":"))
		} else {
			d := strings.TrimSpace(desc)
			for _, sep := range []string{"-", ":", "\u2013", "\u2014"} {
				if strings.HasPrefix(d, sep) {
					d = d[len(sep):]
					break
				}
			}
			desc = d
		}
		if err := validPhaseName(name); err != nil {
			return Spec{}, fmt.Errorf("the spec's line %d: %w: %s", l.n, err, specFormat)
		}
		key := strings.ToLower(name)
		if prev, dup := seen[key]; dup {
			return Spec{}, fmt.Errorf("the spec names two phases %q (lines %d and %d): give each phase a different name", name, prev, l.n)
		}
		if len(s.Phases) == MaxItems {
			return Spec{}, fmt.Errorf("the spec lists more than %d phases: list at most %d", MaxItems, MaxItems)
		}
		seen[key] = l.n
		s.Phases = append(s.Phases, PhaseItem{Number: len(s.Phases) + 1, Name: name, Description: clean(desc)})
		cur = len(s.Phases) - 1
	}
	if len(s.Phases) == 0 {
		return Spec{}, fmt.Errorf("the spec's %q section lists no phase: %s", PhasesHeading, specFormat)
	}
	return s, nil
}

// clean2 bounds a multi-line description (clean per line was done).
func clean2(s string) string {
	if len(s) > maxDesc {
		s = s[:maxDesc]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s = strings.TrimSpace(s)
	}
	return s
}

// numbered splits "12. text" or "12) text" into 12 and "text".
func numbered(t string) (int, string, bool) {
	i := 0
	for i < len(t) && i < 4 && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 || i+1 >= len(t) || (t[i] != '.' && t[i] != ')') || (t[i+1] != ' ' && t[i+1] != '\t') {
		return 0, "", false
	}
	n, _ := strconv.Atoi(t[:i])
	return n, t[i+2:], true
}

func validPhaseName(name string) error {
	switch {
	case name == "":
		return errors.New("a phase's name is empty")
	case len(name) > maxPhaseName:
		return fmt.Errorf("a phase's name is longer than %d bytes", maxPhaseName)
	case !utf8.ValidString(name):
		return errors.New("a phase's name is not valid UTF-8")
	case strings.ContainsRune(name, '*'):
		return errors.New("a phase's name may not hold '*'")
	case strings.HasSuffix(name, ":"):
		return errors.New("a phase's name may not end with ':'")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return errors.New("a phase's name may not hold control characters")
		}
	}
	return nil
}

// Markdown writes the spec's section as ParseSpec reads it (a
// description's later lines indented four spaces).
func (s Spec) Markdown() []byte {
	var b strings.Builder
	b.WriteString(PhasesHeading + "\n\n")
	for i, p := range s.Phases {
		first, more, _ := strings.Cut(p.Description, "\n")
		b.WriteString(strconv.Itoa(i+1) + ". **" + p.Name + "**")
		if first != "" {
			b.WriteString(" - " + first)
		}
		b.WriteString("\n")
		if more != "" {
			for _, m := range strings.Split(more, "\n") {
				b.WriteString("    " + m + "\n")
			}
		}
	}
	return []byte(b.String())
}
