package artifact

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPaths(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{PlanPath(1, "Add OAuth login!"), ".loopr/plans/001-add-oauth-login.plan.md"},
		{SpecPath(12, "auth-api"), ".loopr/specs/012-auth-api.spec.md"},
		{PhasePath(1234, "Set up"), ".loopr/phases/1234-set-up.phase.md"},
		{PhasePath(-5, ""), ".loopr/phases/000-untitled.phase.md"},
		{SpecPath(3, "../../etc/passwd"), ".loopr/specs/003-etc-passwd.spec.md"},
		{Path(api.LoopPlan, 2, "x"), ".loopr/plans/002-x.plan.md"},
		{Path(api.LoopSpec, 2, "x"), ".loopr/specs/002-x.spec.md"},
		{Path(api.LoopPhase, 2, "x"), ".loopr/phases/002-x.phase.md"},
		{Path(api.LoopCode, 2, "x"), ""},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Hello, World":                 "hello-world",
		"  --a--b--  ":                 "a-b",
		"":                             "untitled",
		"!!!":                          "untitled",
		"Ünïcödé café":                 "n-c-d-caf",
		"x/../y":                       "x-y",
		strings.Repeat("ab", 50):       strings.Repeat("ab", 20),
		strings.Repeat("a", 39) + " b": strings.Repeat("a", 39),
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

const goodPlan = "# Plan: login\n\nSome prose.\n\n```\n## Specs to Create\n- spec-fake: in a code block\n```\n\n" +
	"## Specs to Create\n\nWe need:\n\n- spec-auth-api: the login endpoints\n* **spec-storage**: where users live\n" +
	"+ `spec-ui`: the form\n- not a spec: prose in a list\n   - spec-nested3: three spaces is still an item\n\n## Risks\n- spec-after: not in the section\n"

func TestParsePlan(t *testing.T) {
	p, err := ParsePlan([]byte(goodPlan))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpecItem{{"auth-api", "the login endpoints"}, {"storage", "where users live"}, {"ui", "the form"}, {"nested3", "three spaces is still an item"}}
	if !reflect.DeepEqual(p.Specs, want) {
		t.Fatalf("specs %+v, want %+v", p.Specs, want)
	}
	p2, err := ParsePlan(p.Markdown())
	if err != nil || !reflect.DeepEqual(p2, p) {
		t.Fatalf("round trip: %+v %v", p2, err)
	}
	for _, c := range []struct{ in, msg string }{
		{"# Plan\n- spec-a: x\n", `no "## Specs to Create" section`},
		{"## Specs to Create\n\nnothing\n## Next\n- spec-a: x\n", "lists no spec"},
		{"## Specs to Create\n- spec-: x\n", "name is empty"},
		{"## Specs to Create\n- spec-Auth: x\n", "lowercase letters"},
		{"## Specs to Create\n- spec-a_b: x\n", "lowercase letters"},
		{"## Specs to Create\n- spec--a: x\n", "may not start"},
		{"## Specs to Create\n- spec-a x\n", "no ':'"},
		{"## Specs to Create\n- spec-a:   \n", "no description"},
		{"## Specs to Create\n- spec-a: x\n- spec-b: y\n- spec-a: z\n", "twice (lines 2 and 4)"},
		{"## Specs to Create\n- spec-" + strings.Repeat("a", 65) + ": x\n", "longer than 64"},
		{"## Specs to Create\n" + strings.Repeat("- spec-x: y\n", 1) + manySpecs(101), "more than 100"},
		{strings.Repeat("x", MaxArtifact+1), "larger than 1 MiB"},
	} {
		_, err := ParsePlan([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParsePlan(%.60q): %v, want an error with %q", c.in, err, c.msg)
		} else if !errors.Is(err, ErrTooLarge) && !strings.Contains(err.Error(), "spec") {
			t.Errorf("the error does not say what is expected: %v", err)
		}
	}
	if _, err := ParsePlan([]byte(strings.Repeat("x", MaxArtifact+1))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
	if p, err := ParsePlan([]byte("## Specs to Create\n" + manySpecs(100))); err != nil || len(p.Specs) != 100 {
		t.Errorf("100 specs: %d %v", len(p.Specs), err)
	}
	// The heading is matched whatever its case and spacing; CRLF lines.
	if p, err := ParsePlan([]byte("##   specs TO create  \r\n- spec-a: b\r\n")); err != nil || p.Specs[0] != (SpecItem{"a", "b"}) {
		t.Errorf("loose heading: %+v %v", p, err)
	}
}

func manySpecs(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("- spec-s" + Slug(strings.Repeat("x", i%5)) + itoa(i) + ": d\n")
	}
	return b.String()
}

func itoa(i int) string { return string(rune('a'+i/26%26)) + string(rune('a'+i%26)) }

const goodSpec = "# Spec\n\n## Overview\n1. **Not** - a phase\n\n## Phases\n\n1. **Setup** - make the module\n" +
	"   with its go.mod\n   and a README\n2) **Storage**: the file format\n3. **Wire it:** call it\n" +
	"4. plain item, no name\n   10. **Nested** - a continuation\n### Notes\n5. **Test** – with an en dash\n" +
	"```\n6. **Fenced** - skipped\n```\n## After\n7. **Late** - not a phase\n"

func TestParseSpec(t *testing.T) {
	s, err := ParseSpec([]byte(goodSpec))
	if err != nil {
		t.Fatal(err)
	}
	want := []PhaseItem{
		{1, "Setup", "make the module\nwith its go.mod\nand a README"},
		{2, "Storage", "the file format"},
		{3, "Wire it", "call it"},
		{4, "Test", "with an en dash"},
	}
	if !reflect.DeepEqual(s.Phases, want) {
		t.Fatalf("phases %+v\nwant %+v", s.Phases, want)
	}
	s2, err := ParseSpec(s.Markdown())
	if err != nil || !reflect.DeepEqual(s2, s) {
		t.Fatalf("round trip: %+v %v\n%s", s2, err, s.Markdown())
	}
	for _, c := range []struct{ in, msg string }{
		{"# Spec\n1. **A** - x\n", `no "## Phases" section`},
		{"## Phases\n- **A** - bullets\n", "lists no phase"},
		{"## Phases\n1. **A - x\n", `no closing "**"`},
		{"## Phases\n1. **** - x\n", "name is empty"},
		{"## Phases\n1. **A** - x\n2. **a** - y\n", `two phases "a" (lines 2 and 3)`},
		{"## Phases\n1. **" + strings.Repeat("n", 101) + "** - x\n", "longer than 100"},
		{"## Phases\n" + manyPhases(101), "more than 100"},
		{strings.Repeat("\n", MaxArtifact+1), "larger than 1 MiB"},
	} {
		_, err := ParseSpec([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseSpec(%.60q): %v, want an error with %q", c.in, err, c.msg)
		}
	}
	if s, err := ParseSpec([]byte("## Phases\n" + manyPhases(100))); err != nil || len(s.Phases) != 100 {
		t.Errorf("100 phases: %d %v", len(s.Phases), err)
	}
}

func manyPhases(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("1. **P" + itoa(i) + "** - d\n")
	}
	return b.String()
}

func TestReadBeneath(t *testing.T) {
	wt := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	rel := PlanPath(1, "x")
	if err := os.MkdirAll(filepath.Join(wt, filepath.Dir(rel)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, rel), []byte("plan"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadBeneath(wt, rel, 0); err != nil || string(b) != "plan" {
		t.Fatalf("ReadBeneath: %q %v", b, err)
	}
	if _, err := ReadBeneath(wt, rel, 3); err == nil {
		t.Fatal("over max: no error")
	}
	if _, err := ReadBeneath(wt, ".loopr/plans/none.md", 0); !beneath.IsNotExist(err) {
		t.Fatalf("missing: %v", err)
	}
	// Links (to the file, to a directory on the way), a hard link, a
	// FIFO, "..": refused.
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(wt, ".loopr/plans/link.md")))
	must(os.Symlink(filepath.Dir(outside), filepath.Join(wt, ".loopr/dirlink")))
	must(syscall.Mkfifo(filepath.Join(wt, ".loopr/plans/fifo.md"), 0o600))
	hard := filepath.Join(wt, ".loopr/plans/hard.md")
	if err := os.Link(outside, hard); err != nil {
		t.Logf("no hard link across these directories (%v): not tested", err)
		hard = ""
	}
	bad := []string{".loopr/plans/link.md", ".loopr/dirlink/secret", ".loopr/plans/fifo.md", "../x", "/etc/passwd"}
	if hard != "" {
		bad = append(bad, ".loopr/plans/hard.md")
	}
	for _, r := range bad {
		if b, err := ReadBeneath(wt, r, 0); !errors.Is(err, beneath.ErrRefused) {
			t.Errorf("ReadBeneath(%s): %q %v, want a refusal", r, b, err)
		}
	}
}

func TestRender(t *testing.T) {
	in := PromptInput{LoopID: "1-abc", Task: "Add a login page", Artifact: PlanPath(1, "add a login page"),
		Validation: "make check", Iteration: 1, MaxIterations: 10}
	p, err := Render(api.LoopPlan, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Add a login page", in.Artifact, "## Specs to Create", "- spec-<name>: ", "Do not run git",
		"`make check`", "iteration 1 of at most 10"} {
		if !strings.Contains(p, s) {
			t.Errorf("the plan prompt lacks %q:\n%s", s, p)
		}
	}
	if strings.Contains(p, FeedbackHeading) || strings.Contains(p, "## Input") {
		t.Errorf("a first iteration's prompt has feedback or input:\n%s", p)
	}
	// Each type names its artifact, its format, the input; the feedback
	// comes after a failure.
	fb := Feedback(1, []byte("FAIL: TestX\n"))
	for lt, must := range map[api.LoopType][]string{
		api.LoopSpec:  {"## Phases", "1. **<Name>** - ", ".loopr/specs/001-s.spec.md"},
		api.LoopPhase: {"files to create or change", ".loopr/phases/001-s.phase.md"},
		api.LoopCode:  {"Write the code", "Implement: "},
	} {
		in := PromptInput{LoopID: "1-abc-001", Task: "s: the thing", Input: "THE INPUT\n", InputPath: ".loopr/plans/001-x.plan.md",
			Artifact: Path(lt, 1, "s"), Iteration: 2, MaxIterations: 10, Progress: fb}
		p, err := Render(lt, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(must, "THE INPUT", "## Input: .loopr/plans/001-x.plan.md", "Do not run git",
			FeedbackHeading+"\n\n---\n## Iteration 1 Failed\nFAIL: TestX\n") {
			if !strings.Contains(p, s) {
				t.Errorf("the %s prompt lacks %q:\n%s", lt, s, p)
			}
		}
		if strings.Index(p, FeedbackHeading) < strings.Index(p, "THE INPUT") {
			t.Errorf("the feedback is not at the end")
		}
		if strings.Contains(p, "orchestrd runs") {
			t.Errorf("a prompt without validation names one")
		}
	}
	if _, err := Render("bogus", in); err == nil {
		t.Error("Render of an unknown type: no error")
	}
	// A long progress keeps its newest part, from an iteration's start.
	var prog strings.Builder
	for i := 1; i <= 40; i++ {
		prog.WriteString(Feedback(i, bytes.Repeat([]byte("y"), 4000)))
	}
	in.Progress = prog.String()
	p, err = Render(api.LoopPlan, in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p, "## Iteration 40 Failed") || strings.Contains(p, "## Iteration 1 Failed") ||
		!strings.Contains(p, "is left out]\n\n---\n## Iteration ") || len(p) > MaxProgress+8000 {
		t.Errorf("long progress: %d bytes, %q...", len(p), p[strings.Index(p, FeedbackHeading):][:200])
	}
}

func TestLoadTemplates(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "code.tmpl")
	if err := os.WriteFile(good, []byte("Do {{.Task}} in {{.LoopID}}.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tt, err := LoadTemplates(map[api.LoopType]string{api.LoopCode: good})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tt.Render(api.LoopCode, PromptInput{LoopID: "L", Task: "it", Progress: "\n---\n## Iteration 3 Failed\nno\n"})
	if err != nil || p != "Do it in L.\n\n"+FeedbackHeading+"\n\n---\n## Iteration 3 Failed\nno\n\n" {
		t.Fatalf("custom template: %q %v", p, err)
	}
	// The other types keep the built-in ones.
	if p, err := tt.Render(api.LoopPlan, PromptInput{Task: "t"}); err != nil || !strings.Contains(p, "## Specs to Create") {
		t.Fatalf("default plan: %v", err)
	}
	for name, text := range map[string]string{"syntax.tmpl": "{{.Task", "field.tmpl": "{{.Nope}}", "big.tmpl": strings.Repeat("x", maxTemplate+1), "bad.tmpl": "\xff"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTemplates(map[api.LoopType]string{api.LoopSpec: p}); err == nil || !strings.Contains(err.Error(), "[loops] prompts") {
			t.Errorf("%s: %v, want a config error", name, err)
		}
	}
	if _, err := LoadTemplates(map[api.LoopType]string{api.LoopSpec: filepath.Join(dir, "none")}); err == nil {
		t.Error("a missing file: no error")
	}
	if _, err := LoadTemplates(map[api.LoopType]string{"bogus": good}); err == nil {
		t.Error("an unknown type: no error")
	}
}

func TestFeedback(t *testing.T) {
	if got := Feedback(3, []byte("boom")); got != "\n---\n## Iteration 3 Failed\nboom\n" {
		t.Fatalf("%q", got)
	}
	// 12005 bytes: the 8 KiB tail would start inside an "é"; an invalid byte.
	out := append(append([]byte("a"), bytes.Repeat([]byte("é"), 6000)...), []byte("\xffEN")...)
	got := Feedback(1, out)
	body := strings.TrimPrefix(got, "\n---\n## Iteration 1 Failed\n")
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "\uFFFDEN\n") || !strings.HasPrefix(body, "[... 3813 bytes of output cut ...]\n") {
		t.Fatalf("cut feedback: %q...%q", got[:80], got[len(got)-20:])
	}
	if n := len(strings.TrimPrefix(body, "[... 3813 bytes of output cut ...]\n")); n > MaxFeedback+3 {
		t.Fatalf("kept %d bytes", n)
	}
}

// A failed validation's feedback is never only its heading: it names the
// command, its exit code (or how it ended), its duration and its
// output's tail, "(no output)" when it printed nothing, within bounds.
func TestValidationFeedback(t *testing.T) {
	three := int32(3)
	got := ValidationFeedback(2, Validation{Command: "make check", ExitCode: &three, Duration: 1204*time.Millisecond + 300*time.Microsecond})
	if want := "\n---\n## Iteration 2 Failed\nThe validation command failed: exit 3, after 1.204s.\nCommand: make check\nOutput: (no output)\n"; got != want {
		t.Fatalf("no output:\n%q\nwant\n%q", got, want)
	}
	got = ValidationFeedback(1, Validation{Note: "1 tool use of the agent was denied.\n", Command: "go vet ./...\ngo test ./...",
		Ended: "killed at its 5m0s timeout\nsecond line", Duration: 5 * time.Minute, Output: []byte("FAIL: TestX")})
	if want := "\n---\n## Iteration 1 Failed\n1 tool use of the agent was denied.\n" +
		"The validation command failed: killed at its 5m0s timeout, after 5m0s.\nCommand: go vet ./...\n    go test ./...\nOutput:\nFAIL: TestX\n"; got != want {
		t.Fatalf("timeout:\n%q\nwant\n%q", got, want)
	}
	// Bounded: a long command is cut, the output keeps its tail.
	got = ValidationFeedback(1, Validation{Command: strings.Repeat("é", MaxCommand), ExitCode: &three,
		Output: append(bytes.Repeat([]byte("x"), 3*MaxFeedback), "END"...)})
	if len(got) > MaxFeedback+MaxCommand+300 || !strings.Contains(got, " bytes cut]\n") || !strings.HasSuffix(got, "xEND\n") ||
		!strings.Contains(got, "Output:\n[... 16387 bytes of output cut ...]\n") || !utf8.ValidString(got) {
		t.Fatalf("bounds: %d bytes %q...%q", len(got), got[:200], got[len(got)-40:])
	}
	// The plain feedback of a failure with nothing to say.
	if got := Feedback(4, nil); got != "\n---\n## Iteration 4 Failed\n(no output)\n" {
		t.Fatalf("empty: %q", got)
	}
}

// RemoveBeneath removes an artifact, passes over one not there, and never
// removes through a link the agent left on the way (commit_artifacts =
// false drops a tree's artifacts from a worktree an agent wrote).
func TestRemoveBeneath(t *testing.T) {
	wt, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(wt, ".loopr", "plans"), 0o755); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(wt, ".loopr", "plans", "001-x.plan.md")
	if err := os.WriteFile(plan, []byte("# Plan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveBeneath(wt, ".loopr/plans/001-x.plan.md"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(plan); !os.IsNotExist(err) {
		t.Fatalf("the artifact is still there: %v", err)
	}
	if err := RemoveBeneath(wt, ".loopr/plans/001-x.plan.md"); err != nil {
		t.Fatalf("an artifact not there: %v", err)
	}
	// .loopr/specs is a link to a directory outside: refused, the file
	// there kept.
	victim := filepath.Join(outside, "001-s.spec.md")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(wt, ".loopr", "specs")); err != nil {
		t.Fatal(err)
	}
	if err := RemoveBeneath(wt, ".loopr/specs/001-s.spec.md"); err == nil || !errors.Is(err, beneath.ErrRefused) {
		t.Fatalf("through a link: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the file beyond the link: %v", err)
	}
}
