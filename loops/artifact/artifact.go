// Package artifact is what Loopr's loops write and read: the paths of
// plans, specs and phases in a loop's worktree, their parsers (the plan's
// "## Specs to Create" list, the spec's "## Phases"), reading them
// beneath the worktree the agent controls, the prompts an iteration's
// agent gets, and the feedback a failed iteration leaves for the next.
//
// Everything here reads what an agent wrote: it is bounded, parsed
// without panicking (fuzzed), and a parse error says what was expected,
// in words meant for the agent's next prompt.
package artifact

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/beneath"
)

// Bounds on an artifact.
const (
	MaxArtifact = 1 << 20 // bytes of a plan, spec or phase read or parsed
	MaxItems    = 100     // specs in a plan, phases in a spec
	MaxSlug     = 40      // bytes of a slug
)

// Where Loopr keeps its artifacts, relative to a worktree.
const (
	PlansDir  = ".loopr/plans"
	SpecsDir  = ".loopr/specs"
	PhasesDir = ".loopr/phases"
)

// PlanPath is the n-th plan's path: .loopr/plans/NNN-slug.plan.md (slug
// passed through Slug, n below 0 taken as 0).
func PlanPath(n int, slug string) string { return path(PlansDir, n, slug, "plan") }

// SpecPath is .loopr/specs/NNN-slug.spec.md.
func SpecPath(n int, slug string) string { return path(SpecsDir, n, slug, "spec") }

// PhasePath is .loopr/phases/NNN-slug.phase.md.
func PhasePath(n int, slug string) string { return path(PhasesDir, n, slug, "phase") }

// Path is the artifact path of a loop of type t: PlanPath, SpecPath or
// PhasePath; "" for a code loop (it writes code, not an artifact).
func Path(t api.LoopType, n int, slug string) string {
	switch t {
	case api.LoopPlan:
		return PlanPath(n, slug)
	case api.LoopSpec:
		return SpecPath(n, slug)
	case api.LoopPhase:
		return PhasePath(n, slug)
	}
	return ""
}

func path(dir string, n int, slug, kind string) string {
	if n < 0 {
		n = 0
	}
	num := strconv.Itoa(n)
	if len(num) < 3 {
		num = strings.Repeat("0", 3-len(num)) + num
	}
	return dir + "/" + num + "-" + Slug(slug) + "." + kind + ".md"
}

// Slug makes text a file-name part: lowercase ASCII letters and digits,
// every other run of characters one '-', no '-' at either end, at most
// MaxSlug bytes; "untitled" when nothing is left.
func Slug(text string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(text) && b.Len() < MaxSlug; i++ {
		c := text[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
			fallthrough
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			if b.Len() < MaxSlug {
				b.WriteByte(c)
			}
		default:
			dash = true
		}
	}
	s := strings.TrimRight(b.String(), "-")
	if s == "" {
		return "untitled"
	}
	return s
}

// ReadBeneath reads the artifact rel (slash-separated, relative) beneath
// worktree, at most max bytes (max <= 0: MaxArtifact), without following
// a link on the way: the agent controls the worktree, so a link to a file
// elsewhere, a FIFO, a hard link or a "..", is refused (see
// platform/beneath; errors.Is(err, beneath.ErrRefused)). A file that
// is not there is an error beneath.IsNotExist tells.
func ReadBeneath(worktree, rel string, max int64) ([]byte, error) {
	if max <= 0 {
		max = MaxArtifact
	}
	d, err := beneath.OpenRoot(worktree, beneath.Options{})
	if err != nil {
		return nil, fmt.Errorf("reading artifact %s: %w", rel, err)
	}
	defer d.Close()
	b, err := d.ReadFile(rel, max)
	if err != nil {
		return nil, fmt.Errorf("reading artifact %s: %w", rel, err)
	}
	return b, nil
}

// RemoveBeneath removes the file rel beneath worktree without following
// links (platform/beneath); one that is not there is not an error.
func RemoveBeneath(worktree, rel string) error {
	d, err := beneath.OpenRoot(worktree, beneath.Options{})
	if err != nil {
		return fmt.Errorf("removing %s: %w", rel, err)
	}
	defer d.Close()
	if err := d.Remove(rel); err != nil && !beneath.IsNotExist(err) {
		return fmt.Errorf("removing %s: %w", rel, err)
	}
	return nil
}
