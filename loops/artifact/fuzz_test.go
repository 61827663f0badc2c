package artifact

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// ParsePlan never panics; what it returns is bounded and valid, and its
// Markdown parses back to the same plan.
func FuzzParsePlan(f *testing.F) {
	for _, s := range []string{goodPlan, "## Specs to Create\n- spec-a: b\n", "## Specs to Create\n- **spec-a:** b\n",
		"## Specs to Create\n- `spec-a`: ` b\n", "```\n## Specs to Create\n```\n- spec-a: b", "##\tSpecs to Create\n* spec-a-b-c: \xff\x00x\n",
		"## Specs to Create\n- spec-a: x\n- spec-a: y\n", "", "## Specs to Create ##\n+ SPEC-x: y"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePlan(b)
		if err != nil {
			if p.Specs != nil {
				t.Fatalf("an error and specs")
			}
			return
		}
		if len(p.Specs) == 0 || len(p.Specs) > MaxItems {
			t.Fatalf("%d specs", len(p.Specs))
		}
		seen := map[string]bool{}
		for _, s := range p.Specs {
			if validName(s.Name) != nil || seen[s.Name] || s.Description == "" || len(s.Description) > maxDesc ||
				!utf8.ValidString(s.Description) || strings.ContainsAny(s.Description, "\n\r\x00") {
				t.Fatalf("bad spec %+v", s)
			}
			seen[s.Name] = true
		}
		p2, err := ParsePlan(p.Markdown())
		if err != nil || !reflect.DeepEqual(p, p2) {
			t.Fatalf("round trip: %+v -> %q -> %+v %v", p, p.Markdown(), p2, err)
		}
	})
}

// ParseSpec likewise.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{goodSpec, "## Phases\n1. **A** - b\n", "## Phases\n1. **A:** b\n  more\n\n    code\n",
		"## Phases\n1) **A**\n    ## x\n    ```\n", "## Phases\n1. **A** - - b", "## Phases\n1. **A\n", "## Phases\n99999. **x**",
		"## Phases\n1. **a**\n2. **A**\n", "## Phases\n1. ** \t **\n", "## Phases\n1. **\xff**"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err != nil {
			if s.Phases != nil {
				t.Fatalf("an error and phases")
			}
			return
		}
		if len(s.Phases) == 0 || len(s.Phases) > MaxItems {
			t.Fatalf("%d phases", len(s.Phases))
		}
		for i, p := range s.Phases {
			if p.Number != i+1 || validPhaseName(p.Name) != nil || strings.TrimSpace(p.Name) != p.Name ||
				len(p.Description) > maxDesc || !utf8.ValidString(p.Description) {
				t.Fatalf("bad phase %+v", p)
			}
		}
		s2, err := ParseSpec(s.Markdown())
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: %+v -> %q -> %+v %v", s, s.Markdown(), s2, err)
		}
	})
}

// Slug is never empty, bounded, and only [a-z0-9-] without a '-' at
// either end or twice; a slug is its own slug.
func FuzzSlug(f *testing.F) {
	for _, s := range []string{"", "Hello World", "--", "ü", strings.Repeat("a-", 50), "../../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s := Slug(in)
		if s == "" || len(s) > MaxSlug || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
			t.Fatalf("Slug(%q) = %q", in, s)
		}
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				t.Fatalf("Slug(%q) = %q", in, s)
			}
		}
		if Slug(s) != s {
			t.Fatalf("Slug(Slug(%q)) = %q, not %q", in, Slug(s), s)
		}
	})
}

// Feedback is valid UTF-8, bounded, and ends with the output's tail.
func FuzzFeedback(f *testing.F) {
	f.Add(1, []byte("x"))
	f.Add(2, []byte(strings.Repeat("é", 5000)+"\xff"))
	f.Fuzz(func(t *testing.T, n int, out []byte) {
		fb := Feedback(n, out)
		if !utf8.ValidString(fb) || len(fb) > 3*MaxFeedback+200 || !strings.HasSuffix(fb, "\n") {
			t.Fatalf("Feedback: %d bytes", len(fb))
		}
	})
}

// ValidationFeedback is valid UTF-8, bounded, names its command's start
// and ends with the output's tail or "(no output)".
func FuzzValidationFeedback(f *testing.F) {
	f.Add(1, "make check", int32(3), int64(1500), "", []byte("x"))
	f.Add(2, strings.Repeat("é", 800)+"\xff", int32(-1), int64(-5), "timed out\nafter", []byte(strings.Repeat("é", 5000)+"\xff"))
	f.Fuzz(func(t *testing.T, n int, cmd string, code int32, ms int64, ended string, out []byte) {
		fb := ValidationFeedback(n, Validation{Command: cmd, ExitCode: &code, Ended: ended, Duration: time.Duration(ms) * time.Millisecond, Output: out})
		if !utf8.ValidString(fb) || len(fb) > 3*(MaxFeedback+2*MaxCommand)+300 || !strings.HasSuffix(fb, "\n") ||
			!strings.Contains(fb, "exit "+strconv.Itoa(int(code))) {
			t.Fatalf("ValidationFeedback: %d bytes", len(fb))
		}
		if len(out) == 0 && !strings.HasSuffix(fb, "Output: (no output)\n") {
			t.Fatalf("no output: %q", fb)
		}
	})
}
