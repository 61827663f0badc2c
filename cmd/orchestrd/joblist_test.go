package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

type listPage struct {
	Jobs       []api.JobRecord `json:"jobs"`
	NextCursor string          `json:"next_cursor"`
}

// job.list with a limit pages through every job exactly once, newest
// first; since keeps the recent ones (a time or a duration ago); bad
// params are refused naming the param; without a limit it lists every
// job oldest first, as it always did.
func TestJobListPages(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n[lanes.other]\nrunners = 0\n")
	var ids []string // oldest first
	for i := range 23 {
		ids = append(ids, d.submit(api.JobSpec{Lane: "hold", Argv: []string{"echo", fmt.Sprint(i)}}))
	}
	d.submit(api.JobSpec{Lane: "other", Argv: []string{"true"}})

	var seen []string
	cursor, pages := "", 0
	for {
		var p listPage
		params := map[string]any{"lane": "hold", "limit": 5}
		if cursor != "" {
			params["cursor"] = cursor
		}
		d.mustCall("job.list", params, &p)
		pages++
		if len(p.Jobs) > 5 || (p.NextCursor != "" && len(p.Jobs) != 5) {
			t.Fatalf("page %d: %d jobs, next %q", pages, len(p.Jobs), p.NextCursor)
		}
		for _, j := range p.Jobs {
			seen = append(seen, j.ID)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if pages != 5 || !slices.Equal(seen, want) {
		t.Fatalf("%d pages listed %v\nwant newest first, each once: %v", pages, seen, want)
	}

	// Without a limit: every job, oldest first, no cursor.
	var all listPage
	d.mustCall("job.list", map[string]any{"lane": "hold"}, &all)
	if len(all.Jobs) != len(ids) || all.Jobs[0].ID != ids[0] || all.NextCursor != "" {
		t.Fatalf("job.list without a limit: %d jobs, first %v, next %q", len(all.Jobs), all.Jobs[0].ID, all.NextCursor)
	}

	// since: a time keeps the jobs created at or after it; a duration
	// means that long ago.
	since := d.job(ids[20]).CreatedAt
	var recent listPage
	d.mustCall("job.list", map[string]any{"lane": "hold", "since": since.Format(time.RFC3339Nano)}, &recent)
	if len(recent.Jobs) != 3 || recent.Jobs[0].ID != ids[20] {
		t.Fatalf("since %s: %d jobs (%v), want the last 3", since, len(recent.Jobs), recent.Jobs)
	}
	d.mustCall("job.list", map[string]any{"since": "1h", "limit": 100}, &recent)
	if len(recent.Jobs) != 24 {
		t.Fatalf("since 1h: %d jobs, want 24", len(recent.Jobs))
	}
	d.mustCall("job.list", map[string]any{"since": time.Now().Add(time.Hour).Format(time.RFC3339)}, &recent)
	if len(recent.Jobs) != 0 {
		t.Fatalf("since an hour from now: %d jobs", len(recent.Jobs))
	}

	for _, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"limit": -1}, "limit must be between 1 and 10000"},
		{map[string]any{"limit": 10001}, "limit must be between 1 and 10000"},
		{map[string]any{"limit": "ten"}, "limit"},
		{map[string]any{"limit": 5, "cursor": "abc"}, `cursor "abc" is not one job.list gave`},
		{map[string]any{"cursor": "5"}, "cursor continues a paged list"},
		{map[string]any{"since": "yesterday"}, `since must be an RFC 3339 time`},
		{map[string]any{"since": "-1h"}, `since must be an RFC 3339 time`},
		{map[string]any{"state": "bogus"}, `unknown state "bogus"`},
	} {
		err := d.call("job.list", tc.params, nil)
		if remoteCode(err) != api.CodeInvalidParams || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("job.list %v: %v, want -32602 saying %q", tc.params, err, tc.want)
		}
	}
}

// `orchestrd jobs` prints a page newest first with the command for the
// next one, which prints the rest.
func TestJobsCommandPages(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n[lanes.work]\nrunners = 1\nspares = 0\nnetwork = \"host\"\n")
	var ids []string
	for i := range 7 {
		ids = append(ids, d.submit(api.JobSpec{Lane: "hold", Argv: []string{"echo", fmt.Sprint(i)}}))
	}
	done := d.submit(api.JobSpec{Lane: "work", Argv: []string{"sh", "-c", "exit 4"}})
	d.wait(done)

	out, errOut, code := runCLI(t, "jobs", "--home", d.home, "--lane", "hold", "--since", "1h", "--limit", "4")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "CREATED") {
		t.Fatalf("jobs: exit %d, stderr %q\n%s", code, errOut, out)
	}
	for i, id := range []string{ids[6], ids[5], ids[4], ids[3]} {
		if !strings.HasPrefix(lines[1+i], id+" ") {
			t.Fatalf("row %d is not %s (newest first):\n%s", i, id, out)
		}
	}
	// The next page's command is on stderr.
	m := regexp.MustCompile(`^orchestrd: 4 jobs shown, there are more: (orchestrd jobs .* --cursor \S+)\n$`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("stderr %q does not say how to get the next page", errOut)
	}
	args := strings.Fields(strings.TrimPrefix(m[1], "orchestrd "))
	out, errOut, code = runCLI(t, args...)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[1], ids[2]+" ") || !strings.HasPrefix(lines[3], ids[0]+" ") {
		t.Fatalf("next page (%v): exit %d, stderr %q\n%s", args, code, errOut, out)
	}

	out, _, code = runCLI(t, "jobs", "--home", d.home, "--state", "failed")
	if code != 0 || !strings.Contains(out, done+" ") || strings.Contains(out, "more") {
		t.Fatalf("jobs --state failed: exit %d\n%s", code, out)
	}
	row := strings.Fields(strings.Split(out, "\n")[1])
	if row[2] != "failed" || row[3] != "4" {
		t.Fatalf("row %v: want state failed, exit 4", row)
	}

	// --json: the page's records and its cursor.
	out, errOut, code = runCLI(t, "jobs", "--home", d.home, "--json", "--lane", "hold", "--limit", "3")
	var page listPage
	if code != 0 || jsonUnmarshal([]byte(out), &page) != nil || len(page.Jobs) != 3 || page.Jobs[0].ID != ids[6] ||
		page.NextCursor == "" || !strings.Contains(errOut, "--cursor "+page.NextCursor) {
		t.Fatalf("jobs --json: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if _, errOut, code = runCLI(t, "jobs", "--home", d.home, "--limit", "x"); code != exitUsage || !strings.Contains(errOut, "--limit") {
		t.Fatalf("jobs --limit x: exit %d, %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, "jobs", "--home", d.home, "--since", "soon"); code != exitUsage || !strings.Contains(errOut, "--since") {
		t.Fatalf("jobs --since soon: exit %d, %q", code, errOut)
	}
}
