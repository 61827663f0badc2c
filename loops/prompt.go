package loops

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// MaxFeedback bounds what one failed iteration adds to a loop's progress
// (the tail of its validation output).
const MaxFeedback = 8 << 10

// maxProgressInPrompt bounds the progress a prompt carries: its last
// bytes (the latest failures).
const maxProgressInPrompt = 64 << 10

// maxArtifact bounds an artifact read (an input artifact in a prompt, a
// plan or spec parsed).
const maxArtifact = 256 << 10

// artifactPath is where a loop of type lt writes its artifact, relative to
// its worktree (Loopr's paths); "" for a code loop, which writes code.
func artifactPath(lt api.LoopType, id string) string {
	switch lt {
	case api.LoopPlan:
		return ".loopr/plans/" + id + ".plan.md"
	case api.LoopSpec:
		return ".loopr/specs/" + id + ".spec.md"
	case api.LoopPhase:
		return ".loopr/phases/" + id + ".phase.md"
	}
	return ""
}

// defaultTemplates are the built-in prompt templates, by loop type.
// {{task}}, {{input}} and {{artifact}} are replaced.
var defaultTemplates = map[api.LoopType]string{
	api.LoopPlan: `You are planning a piece of work in this repository.

## Task
{{task}}

## What to write
Write the plan to {{artifact}} (Markdown). It must have a section
"## Specs to Create" listing each spec as a line "- spec-<name>: <description>".
`,
	api.LoopSpec: `You are writing one spec of an approved plan.

## Task
{{task}}

## Input
{{input}}

## What to write
Write the spec to {{artifact}} (Markdown). It must have a section "## Phases"
numbering each phase as "1. **Name**: what it does".
`,
	api.LoopPhase: `You are detailing one phase of a spec.

## Task
{{task}}

## Input
{{input}}

## What to write
Write the phase to {{artifact}} (Markdown): what to change, file by file, and how to check it.
`,
	api.LoopCode: `You are writing code in this repository.

## Task
{{task}}

## Input
{{input}}

Change the code in this directory until the task is done and its validation passes.
`,
}

// render builds an iteration's prompt from template tmpl: the task, the
// input artifact's content, the artifact's path, and after a failed
// iteration the progress so far under "## Previous Iteration Feedback".
func render(tmpl, task, input, artifact, progress string) string {
	r := strings.NewReplacer("{{task}}", task, "{{input}}", input, "{{artifact}}", artifact)
	out := r.Replace(tmpl)
	if progress != "" {
		if len(progress) > maxProgressInPrompt {
			progress = "[earlier feedback cut]\n" + progress[len(progress)-maxProgressInPrompt:]
		}
		out = strings.TrimRight(out, "\n") + "\n\n## Previous Iteration Feedback\n" + progress
	}
	return out
}

// feedback is what a failed iteration appends to progress: its output's
// tail, at most MaxFeedback bytes.
func feedback(iteration uint32, output string) string {
	if len(output) > MaxFeedback {
		output = output[len(output)-MaxFeedback:]
	}
	return fmt.Sprintf("\n---\n## Iteration %d Failed\n%s\n", iteration, output)
}

// SpecItem is one spec a plan lists.
type SpecItem struct{ Name, Description string }

// parsePlan reads a plan's "## Specs to Create": each "- spec-<name>:
// <description>" line. A plan without one is an error saying what is
// missing.
func parsePlan(doc string) ([]SpecItem, error) {
	var out []SpecItem
	err := section(doc, "## Specs to Create", func(line string) {
		rest, ok := strings.CutPrefix(line, "- spec-")
		if !ok {
			return
		}
		name, desc, _ := strings.Cut(rest, ":")
		name = strings.TrimSpace(name)
		if name == "" || len(name) > 64 || strings.ContainsAny(name, "/\\ \t") {
			return
		}
		out = append(out, SpecItem{Name: name, Description: strings.TrimSpace(desc)})
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the plan's \"## Specs to Create\" lists no \"- spec-<name>: <description>\" line")
	}
	if len(out) > 100 {
		return nil, fmt.Errorf("the plan lists %d specs, over 100", len(out))
	}
	return out, nil
}

// parseSpec reads a spec's "## Phases": each numbered "N. **Name**" item.
func parseSpec(doc string) ([]string, error) {
	var out []string
	err := section(doc, "## Phases", func(line string) {
		i := 0
		for i < len(line) && line[i] >= '0' && line[i] <= '9' {
			i++
		}
		if i == 0 || i >= len(line) || line[i] != '.' {
			return
		}
		rest := strings.TrimSpace(line[i+1:])
		name, ok := strings.CutPrefix(rest, "**")
		if !ok {
			return
		}
		name, _, ok = strings.Cut(name, "**")
		if name = strings.TrimSpace(name); ok && name != "" {
			out = append(out, name)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the spec's \"## Phases\" numbers no \"N. **Name**\" item")
	}
	if len(out) > 100 {
		return nil, fmt.Errorf("the spec numbers %d phases, over 100", len(out))
	}
	return out, nil
}

// section calls line for each trimmed line of doc's section head (up to
// the next "## " heading).
func section(doc, head string, line func(string)) error {
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 4096), maxArtifact)
	in, found := false, false
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "## ") || l == "##" {
			in = strings.EqualFold(l, head)
			found = found || in
			continue
		}
		if in {
			line(l)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the artifact: %w", err)
	}
	if !found {
		return fmt.Errorf("no %q section", head)
	}
	return nil
}
