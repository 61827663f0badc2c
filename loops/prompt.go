package loops

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/artifact"
)

// MaxFeedback bounds what one failed iteration adds to a loop's progress
// (the tail of its validation output).
const MaxFeedback = artifact.MaxFeedback

// loopContext is a loop's context (Loopr's free-form JSON): its task and
// where it writes its artifact, fixed when it is made.
type loopContext struct {
	Task     string `json:"task"`
	Artifact string `json:"artifact,omitempty"`
}

func readContext(r api.LoopRecord) loopContext {
	var c loopContext
	if len(r.Context) > 0 {
		_ = json.Unmarshal(r.Context, &c)
	}
	return c
}

func makeContext(task, art string) json.RawMessage {
	b, _ := json.Marshal(loopContext{Task: task, Artifact: art})
	return b
}

// artifactFor is where a new loop of type lt writes its artifact (Loopr's
// .loopr/plans/NNN-slug.plan.md...): n is its place among its siblings
// (1 for a root), slug made of its task. "" for a code loop.
func artifactFor(lt api.LoopType, id, task string) string {
	n := 1
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		if v, err := strconv.Atoi(id[i+1:]); err == nil && len(id[i+1:]) == 3 {
			n = v
		}
	}
	slug := artifact.Slug(task)
	if slug == "" {
		slug = string(lt)
	}
	return artifact.Path(lt, n, slug)
}

// artifactPath is the loop's artifact, relative to its worktree ("" for a
// code loop).
func artifactPath(r api.LoopRecord) string {
	if r.LoopType == api.LoopCode {
		return ""
	}
	return readContext(r).Artifact
}

// feedback is what a failed iteration appends to progress: its output's
// tail, at most MaxFeedback bytes.
func feedback(iteration uint32, output string) string {
	return artifact.Feedback(int(iteration), []byte(output))
}

// readBeneath reads rel beneath dir without following links, bounded.
func readBeneath(dir, rel string) ([]byte, error) {
	return artifact.ReadBeneath(dir, rel, artifact.MaxArtifact)
}
