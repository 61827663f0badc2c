package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// listJSON decodes a --json list: an object whose members are the things'
// list, next_cursor and truncated, and nothing else.
func listJSON(t *testing.T, what, out, things string) (items []map[string]any, obj map[string]json.RawMessage) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("%s: not a JSON object (%v):\n%s", what, err, out)
	}
	for k := range obj {
		if k != things && k != "next_cursor" && k != "truncated" {
			t.Errorf("%s: member %q besides %s, next_cursor, truncated", what, k, things)
		}
	}
	raw, ok := obj[things]
	if !ok || json.Unmarshal(raw, &items) != nil || items == nil {
		t.Fatalf("%s: no %q list (null is not a list):\n%s", what, things, out)
	}
	return items, obj
}

// Every --json list is an object, {"jobs": [...], "next_cursor": ...}, its
// list never null; a cut list says so in one line on stderr, the same
// everywhere, with the command that shows more; jobs are newest first
// whatever the limit; a listed record has no "output": "" for output that
// exists.
func TestListsHaveOneShape(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n[lanes.work]\nrunners = 1\nspares = 0\nnetwork = \"host\"\n")
	var ids []string // oldest first
	for range 3 {
		ids = append(ids, d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}}))
	}
	wrote := d.submit(api.JobSpec{Lane: "work", Command: "echo hi"})
	d.wait(wrote)
	ids = append(ids, wrote)

	out, errOut, code := runCLI(t, "jobs", "--home", d.home, "--json")
	jobs, obj := listJSON(t, "jobs --json", out, "jobs")
	if code != 0 || errOut != "" || len(jobs) != 4 || obj["next_cursor"] != nil || obj["truncated"] != nil {
		t.Fatalf("jobs --json: exit %d, stderr %q\n%s", code, errOut, out)
	}
	for i, j := range jobs {
		if j["id"] != ids[len(ids)-1-i] {
			t.Fatalf("jobs --json is not newest first: %v at %d, want %s", j["id"], i, ids[len(ids)-1-i])
		}
	}
	if _, has := jobs[0]["output"]; has || jobs[0]["output_bytes"] != float64(3) {
		t.Fatalf("a listed record with output: output %q, output_bytes %v; want no output member", jobs[0]["output"], jobs[0]["output_bytes"])
	}

	hint := regexp.MustCompile(`^orchestrd: 2 jobs shown, there are more: (orchestrd jobs .*--limit 2 --cursor \S+)( --json)?\n$`)
	out, errOut, code = runCLI(t, "jobs", "--home", d.home, "--json", "--limit", "2")
	jobs, obj = listJSON(t, "jobs --json --limit 2", out, "jobs")
	if code != 0 || len(jobs) != 2 || obj["next_cursor"] == nil || string(obj["truncated"]) != "true" || !hint.MatchString(errOut) {
		t.Fatalf("jobs --json --limit 2: exit %d, stderr %q\n%s", code, errOut, out)
	}
	// The table: only the rows on stdout, the hint on stderr.
	out, errOut, code = runCLI(t, "jobs", "--home", d.home, "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !hint.MatchString(errOut) {
		t.Fatalf("jobs --limit 2: exit %d, stderr %q\n%s", code, errOut, out)
	}
	// --limit 0, every job: newest first too.
	out, _, code = runCLI(t, "jobs", "--home", d.home, "--limit", "0")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[1], wrote+" ") || !strings.HasPrefix(lines[4], ids[0]+" ") {
		t.Fatalf("jobs --limit 0 is not newest first:\n%s", out)
	}

	for _, tc := range []struct {
		args   []string
		things string
	}{
		{[]string{"approvals", "--json"}, "approvals"},
		{[]string{"approvals", "--all", "--json"}, "approvals"},
		{[]string{"approvals", "rules", "--json"}, "rules"},
		{[]string{"tasks", "--json"}, "tasks"},
		{[]string{"terminal", "--list", "--json"}, "terminals"},
		{[]string{"clanker", "--json"}, "repos"},
	} {
		out, errOut, code := runCLI(t, append(tc.args, "--home", d.home)...)
		if items, _ := listJSON(t, strings.Join(tc.args, " "), out, tc.things); code != 0 || len(items) != 0 {
			t.Errorf("%v: exit %d, stderr %q\n%s", tc.args, code, errOut, out)
		}
	}
}

// --since takes the same forms in jobs as in events (a duration ago, an
// RFC 3339 time, a clock time today) and a bad one is refused before the
// daemon is asked: exit 2, one line naming the flag.
func TestSinceIsOneParser(t *testing.T) {
	t.Parallel()
	noDaemon := shortTemp(t)
	for _, cmd := range []string{"jobs", "events"} {
		_, errOut, code := runCLI(t, cmd, "--home", noDaemon, "--since", "soon")
		if code != exitUsage || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `--since "soon"`) {
			t.Errorf("%s --since soon: exit %d, stderr %q; want 2 and one line naming --since", cmd, code, errOut)
		}
	}

	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n")
	id := d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}})
	created := d.job(id).CreatedAt
	before := created.Add(-time.Minute)
	for _, since := range []string{"1h", before.Format(time.RFC3339), before.Local().Format("15:04")} {
		out, errOut, code := runCLI(t, "jobs", "--home", d.home, "--since", since)
		if code != 0 || !strings.Contains(out, id+" ") {
			t.Errorf("jobs --since %s: exit %d, stderr %q\n%s", since, code, errOut, out)
		}
	}
	out, errOut, code := runCLI(t, "jobs", "--home", d.home, "--since", created.Add(time.Minute).Format(time.RFC3339))
	if code != 0 || strings.Contains(out, id) {
		t.Errorf("jobs --since a minute after the job: exit %d, stderr %q\n%s", code, errOut, out)
	}
}
