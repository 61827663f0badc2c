package loops

import (
	"path"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// A loop's context comes back from the store, and its artifact path is
// made of a task a client wrote: neither panics, and the path stays
// beneath .loopr, one clean relative path.
func FuzzArtifactFor(f *testing.F) {
	f.Add("plan", "1-00ff-001", "build the widget")
	f.Add("spec", "x-001-002", "spec-alpha: ../../etc/passwd")
	f.Add("phase", "-", "\x00\xff")
	f.Fuzz(func(t *testing.T, lt, id, task string) {
		typ := api.LoopType(lt)
		if !typ.Valid() {
			typ = api.LoopPlan
		}
		p := artifactFor(typ, id, task)
		if typ == api.LoopCode {
			if p != "" {
				t.Fatalf("a code loop's artifact %q", p)
			}
			return
		}
		if !strings.HasPrefix(p, ".loopr/") || path.Clean(p) != p || strings.Contains(p, "..") {
			t.Fatalf("artifactFor(%q, %q, %q) = %q", typ, id, task, p)
		}
		r := api.LoopRecord{LoopType: typ, Context: makeContext(task, p)}
		if got := artifactPath(r); got != p {
			t.Fatalf("the context gave %q back, want %q", got, p)
		}
		if strings.ToValidUTF8(task, "\uFFFD") == task && readContext(r).Task != task {
			t.Fatalf("the task %q came back as %q", task, readContext(r).Task)
		}
		_ = readContext(api.LoopRecord{Context: []byte(task)})
	})
}
