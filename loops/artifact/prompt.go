package artifact

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

// PromptInput is what an iteration's prompt is made of.
type PromptInput struct {
	LoopID        string // the loop's id
	Task          string // what to do: the plan's description; a spec's or phase's name and description
	Input         string // the input artifact's content ("" for none: a plan)
	InputPath     string // where that is, relative to the worktree
	Artifact      string // the file the agent must write, relative to the worktree ("" for a code loop)
	Validation    string // the validation command run in the worktree ("" for none)
	Iteration     uint32 // this iteration's number
	MaxIterations uint32
	Progress      string // the feedback of the failed iterations so far ("" for none)
}

// MaxProgress is how much of PromptInput.Progress a prompt carries: the
// newest, cut at an iteration's boundary when one is near.
const MaxProgress = 64 << 10

// FeedbackHeading heads the feedback of the failed iterations in a
// prompt, after the template's text.
const FeedbackHeading = "## Previous Iteration Feedback"

// maxTemplate bounds a template file.
const maxTemplate = 256 << 10

const common = `{{define "head"}}You are the agent of orchestrd loop {{.LoopID}}, iteration {{.Iteration}} of at most {{.MaxIterations}}. Each iteration starts afresh: what you know of earlier ones is the feedback at the end of this prompt, and what they left in this directory (a git worktree of the project, your current directory).
{{end}}{{define "input"}}{{if .Input}}
## Input: {{.InputPath}}

{{.Input}}

## End of input
{{end}}{{end}}{{define "rules"}}
## Rules

- Work only in the current directory; write every path relative to it.
- Do not run git (no commit, branch, merge or checkout): orchestrd commits everything you leave here once the iteration validates.
{{if .Validation}}- When you are done, orchestrd runs ` + "`{{.Validation}}`" + ` here: the iteration passes when it exits 0; if not, its output is the feedback of the next iteration.
{{end}}{{end}}`

// defaults are the built-in templates, by loop type.
var defaults = map[api.LoopType]string{
	api.LoopPlan: common + `{{template "head" .}}
## Task

{{.Task}}
{{template "input" .}}
## What to write

Write a plan for this task, in Markdown, to the file ` + "`{{.Artifact}}`" + ` (make its directories). Describe the goal and the approach, then split the work into specs. The plan MUST have a section with exactly this heading:

    ## Specs to Create

and under it one line per spec, in the order they should be built:

    - spec-<name>: <one-line description of what the spec covers>

where <name> is lowercase letters, digits and '-' (for example "- spec-storage: the on-disk format and its reader"). List between 1 and 100 specs, each name once. The section ends at the next "## " heading. orchestrd reads this list: each spec becomes a spec loop once a person approves the plan.

Write only the plan: no code.
{{template "rules" .}}`,

	api.LoopSpec: common + `{{template "head" .}}
## Task

Write the spec of: {{.Task}}
{{template "input" .}}
## What to write

Write the spec, in Markdown, to the file ` + "`{{.Artifact}}`" + ` (make its directories): what this part of the plan does, its interfaces and data, its edge cases and errors, how it is tested. Then split its implementation into phases. The spec MUST have a section with exactly this heading:

    ## Phases

and under it each phase as a numbered item whose name is in bold, then a dash and what the phase builds:

    1. **<Name>** - <what this phase builds>
    2. **<Name>** - <...>

Names are short, without '*', each used once; list between 1 and 100 phases, in the order they are built. The section ends at the next "## " heading. Each phase becomes a phase loop, then the code that implements it.

Write only the spec: no code.
{{template "rules" .}}`,

	api.LoopPhase: common + `{{template "head" .}}
## Task

Describe the implementation of the phase: {{.Task}}
{{template "input" .}}
## What to write

Write the phase's description, in Markdown, to the file ` + "`{{.Artifact}}`" + ` (make its directories): precisely what code to write for this phase and only this phase: the files to create or change, the types and functions with their behaviour, the errors, and the tests that prove it works and how to run them. A code loop writes the code from this file alone, so leave nothing to guess.

Write only the description: no code.
{{template "rules" .}}`,

	api.LoopCode: common + `{{template "head" .}}
## Task

Implement: {{.Task}}
{{template "input" .}}
## What to do

Write the code this describes, with its tests, in this directory (the project's source tree). Keep to this phase; keep what earlier work built working.
{{template "rules" .}}`,
}

// Templates are the prompt templates of each loop type (text/template,
// executed with a PromptInput). The zero value is not usable: use
// Default or LoadTemplates.
type Templates struct {
	t map[api.LoopType]*template.Template
}

var builtin = func() *Templates {
	t, err := ParseTemplates(nil)
	if err != nil {
		panic("artifact: the built-in templates: " + err.Error())
	}
	return t
}()

// Default is the built-in templates.
func Default() *Templates { return builtin }

// sample is what a template is tried with at load.
var sample = PromptInput{LoopID: "1-0000000000000000", Task: "task", Input: "input", InputPath: "in.md",
	Artifact: ".loopr/plans/001-task.plan.md", Validation: "true", Iteration: 2, MaxIterations: 10, Progress: "p"}

// ParseTemplates makes Templates from texts by loop type (a type not in
// texts keeps its built-in template). Each is parsed and tried on a
// sample input, so a template that names a field PromptInput has not is
// an error here, not at an iteration.
func ParseTemplates(texts map[api.LoopType]string) (*Templates, error) {
	for lt := range texts {
		if !lt.Valid() {
			return nil, fmt.Errorf("a prompt template for %q: not a loop type (plan, spec, phase, code)", lt)
		}
	}
	out := &Templates{t: map[api.LoopType]*template.Template{}}
	for _, lt := range api.LoopTypes {
		text, ok := texts[lt]
		if !ok {
			text = defaults[lt]
		}
		t, err := template.New(string(lt)).Option("missingkey=error").Parse(text)
		if err != nil {
			return nil, fmt.Errorf("the %s prompt template: %w", lt, err)
		}
		if err := t.Execute(io.Discard, sample); err != nil {
			return nil, fmt.Errorf("the %s prompt template: %w", lt, err)
		}
		out.t[lt] = t
	}
	return out, nil
}

// LoadTemplates reads the template files of [loops] prompts (loop type ->
// path, the operator's) and parses them (ParseTemplates): a file that
// cannot be read, over 256 KiB, not UTF-8 or not a valid template is a
// config error naming the file.
func LoadTemplates(files map[api.LoopType]string) (*Templates, error) {
	texts := map[api.LoopType]string{}
	for lt, p := range files {
		if !lt.Valid() {
			return nil, fmt.Errorf("[loops] prompts: %q is not a loop type (plan, spec, phase, code)", lt)
		}
		b, err := readBounded(p, maxTemplate)
		if err != nil {
			return nil, fmt.Errorf("[loops] prompts: the %s template: %w", lt, err)
		}
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("[loops] prompts: the %s template %s is not UTF-8", lt, p)
		}
		texts[lt] = string(b)
	}
	t, err := ParseTemplates(texts)
	if err != nil {
		return nil, fmt.Errorf("[loops] prompts: %w", err)
	}
	return t, nil
}

func readBounded(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, max)
	}
	return b, nil
}

// Render is the prompt of an iteration of a loop of type lt: its
// template executed with in, then, when in.Progress is not empty, the
// section "## Previous Iteration Feedback" with (the newest MaxProgress
// bytes of) the progress. The feedback is added here, not by the
// template, so that no template can leave it out.
func (t *Templates) Render(lt api.LoopType, in PromptInput) (string, error) {
	tt, ok := t.t[lt]
	if !ok {
		return "", fmt.Errorf("rendering a prompt: %q is not a loop type", lt)
	}
	var b bytes.Buffer
	if err := tt.Execute(&b, in); err != nil {
		return "", fmt.Errorf("rendering the %s prompt: %w", lt, err)
	}
	if p := strings.TrimSpace(in.Progress); p != "" {
		if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteByte('\n')
		}
		b.WriteString("\n" + FeedbackHeading + "\n" + tailProgress(in.Progress) + "\n")
	}
	return b.String(), nil
}

// Render renders with the built-in templates.
func Render(lt api.LoopType, in PromptInput) (string, error) { return builtin.Render(lt, in) }

// tailProgress keeps the newest MaxProgress bytes of progress, from an
// iteration's start ("\n---\n") when one is in the kept part.
func tailProgress(p string) string {
	if len(p) <= MaxProgress {
		return p
	}
	cut := len(p) - MaxProgress
	rest := p[cut:]
	if i := strings.Index(rest, "\n---\n"); i >= 0 {
		cut += i
		rest = p[cut:]
	}
	for len(rest) > 0 && !utf8.RuneStart(rest[0]) {
		rest = rest[1:]
		cut++
	}
	return "[the feedback of earlier iterations, " + strconv.Itoa(cut) + " bytes, is left out]\n" + rest
}

// MaxFeedback is how much of a failed validation's output its feedback
// keeps: the tail.
const MaxFeedback = 8 << 10

// Feedback is what a failed iteration adds to the loop's progress:
// "\n---\n## Iteration N Failed\n<output>\n", the output's last 8 KiB
// (from a character's start), invalid UTF-8 replaced, and a line saying
// how much was cut before it when it was; "(no output)" when there is none.
func Feedback(iteration int, output []byte) string {
	var b strings.Builder
	b.WriteString(failedHeading(iteration))
	writeTail(&b, output)
	return b.String()
}

// MaxCommand is how much of a validation command its feedback names.
const MaxCommand = 1 << 10

// Validation is how an iteration's validation command failed.
type Validation struct {
	// Note comes first: what else the iteration did wrong (the agent's
	// refused tool uses), "" for none.
	Note string
	// Command is the validation command (run by sh -c).
	Command string
	// ExitCode is its exit code; nil when it did not exit (Ended says how).
	ExitCode *int32
	// Ended says how a command that did not exit ended ("killed at its
	// 5m0s timeout", "the job ended failed: runner lost"), "" for none.
	Ended string
	// Duration is how long it ran.
	Duration time.Duration
	// Output is its output's tail.
	Output []byte
}

// ValidationFeedback is what a failed validation adds to the loop's
// progress, never only a heading: the command, how it ended (its exit
// code), how long it ran and its output's tail as Feedback keeps it, or
// "(no output)":
//
//	## Iteration 2 Failed
//	The validation command failed: exit 3, after 1.204s.
//	Command: make check
//	Output: (no output)
func ValidationFeedback(iteration int, v Validation) string {
	var b strings.Builder
	b.WriteString(failedHeading(iteration))
	if v.Note != "" {
		b.WriteString(strings.ToValidUTF8(boundHead(v.Note, MaxCommand), "\uFFFD"))
		if !strings.HasSuffix(v.Note, "\n") {
			b.WriteString("\n")
		}
	}
	var how []string
	if v.ExitCode != nil {
		how = append(how, "exit "+strconv.Itoa(int(*v.ExitCode)))
	}
	if v.Ended != "" {
		how = append(how, strings.ToValidUTF8(firstLineOf(v.Ended, 300), "\uFFFD"))
	}
	if len(how) == 0 {
		how = append(how, "no exit code")
	}
	b.WriteString("The validation command failed: " + strings.Join(how, ", ") +
		", after " + v.Duration.Round(time.Millisecond).String() + ".\n")
	cmd := strings.ToValidUTF8(boundHead(strings.TrimRight(v.Command, "\n"), MaxCommand), "\uFFFD")
	b.WriteString("Command: " + strings.ReplaceAll(cmd, "\n", "\n    ") + "\n")
	if len(v.Output) == 0 {
		b.WriteString("Output: (no output)\n")
		return b.String()
	}
	b.WriteString("Output:\n")
	writeTail(&b, v.Output)
	return b.String()
}

func failedHeading(iteration int) string {
	return "\n---\n## Iteration " + strconv.Itoa(iteration) + " Failed\n"
}

// writeTail writes output's last MaxFeedback bytes (from a character's
// start, invalid UTF-8 replaced) and a newline, after a line saying how
// much was cut when it was; "(no output)" for none.
func writeTail(b *strings.Builder, output []byte) {
	if len(output) == 0 {
		b.WriteString("(no output)\n")
		return
	}
	if len(output) > MaxFeedback {
		cut := len(output) - MaxFeedback
		for k := 0; k < utf8.UTFMax && cut < len(output) && !utf8.RuneStart(output[cut]); k++ {
			cut++
		}
		b.WriteString("[... " + strconv.Itoa(cut) + " bytes of output cut ...]\n")
		output = output[cut:]
	}
	b.WriteString(strings.ToValidUTF8(string(output), "\uFFFD"))
	b.WriteString("\n")
}

// boundHead keeps s's first max bytes (to a character's start), saying
// how much was cut.
func boundHead(s string, max int) string {
	if len(s) <= max {
		return s
	}
	end := max
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + " [... " + strconv.Itoa(len(s)-end) + " bytes cut]"
}

func firstLineOf(s string, max int) string {
	s, _, _ = strings.Cut(s, "\n")
	return boundHead(s, max)
}
