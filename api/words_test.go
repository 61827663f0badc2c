package api

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "job", "0 jobs"}, {1, "job", "1 job"}, {2, "job", "2 jobs"},
		{1, "entry", "1 entry"}, {3, "entry", "3 entries"}, {2, "key", "2 keys"},
		{2, "process", "2 processes"}, {2, "patch", "2 patches"}, {2, "spec loop", "2 spec loops"},
		{2, "tool use", "2 tool uses"}, {2, "repository", "2 repositories"},
	} {
		if got := Count(c.n, c.noun); got != c.want {
			t.Errorf("Count(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}
