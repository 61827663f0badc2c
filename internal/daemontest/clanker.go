package daemontest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The clanker repo's files as its pods write them and the daemon keeps
// them, for clanker's tests beside its code and cmd/orchestrd's (a daemon
// killed in the middle of a drain).

// ClankerConfig is a daemon serving the clanker repo at repo with base and
// judge prompts "BASE" and "JUDGE" and a tick of 50 ms; extra is more of
// the repo's table.
func ClankerConfig(repo, extra string) string {
	return fmt.Sprintf("[[clanker.repos]]\npath = %q\nbase_prompt = \"BASE\"\njudge_prompt = \"JUDGE\"\ntick = \"50ms\"\n%s", repo, extra)
}

// SpoolLine is a spool line as clanker's appendIpcSpoolEntry writes it.
func SpoolLine(typ string, payload any) string {
	b, _ := json.Marshal(struct {
		TS      string `json:"ts"`
		Type    string `json:"type"`
		Payload any    `json:"payload"`
	}{time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), typ, payload})
	return string(b) + "\n"
}

// ClankerLog is a repo's events.log, one decoded line each.
func ClankerLog(t testing.TB, repo string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, ".clanker", "events.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("events.log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// CreatedOnce checks that events.log says TASK_CREATED exactly once for
// each of ids and for nothing else.
func CreatedOnce(t testing.TB, repo string, ids map[string]bool) {
	t.Helper()
	n := map[string]int{}
	for _, e := range ClankerLog(t, repo) {
		if e["type"] == "TASK_CREATED" {
			n[e["taskId"].(string)]++
		}
	}
	for id := range ids {
		if n[id] != 1 {
			t.Errorf("task %s created %d times, want once", id, n[id])
		}
	}
	if len(n) != len(ids) {
		t.Errorf("%d tasks created, want %d", len(n), len(ids))
	}
}

// TaskFiles is how many task files the repo's .clanker/tasks holds.
func TaskFiles(repo string) int {
	ents, _ := os.ReadDir(filepath.Join(repo, ".clanker", "tasks"))
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}

// WhileProgressing waits until count() reaches want, failing only when it
// stops growing for stall: a slow machine is waited for, a stuck daemon
// is not.
// diag, when not nil, is said with the failure.
func WhileProgressing(t testing.TB, stall time.Duration, what string, count func() int, want int, diag func() string) {
	t.Helper()
	last, since := -1, time.Now()
	for {
		n := count()
		if n >= want {
			return
		}
		if n > last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			msg := ""
			if diag != nil {
				msg = "\n" + diag()
			}
			t.Fatalf("no progress for %s waiting for %s: %d of %d%s", stall, what, n, want, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ClankerDiag says where a repo's spool drain is, for a failure's
// message: the files in its .clanker (their sizes), the daemon's last
// clanker events, its log's tail.
func (d *Daemon) ClankerDiag(repo string) string {
	var b strings.Builder
	ents, _ := os.ReadDir(filepath.Join(repo, ".clanker"))
	b.WriteString(".clanker:")
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			fmt.Fprintf(&b, " %s (%d bytes)", e.Name(), info.Size())
		}
	}
	var evs []map[string]any
	for _, e := range d.Events() {
		if k, _ := e["kind"].(string); strings.HasPrefix(k, "clanker.") {
			evs = append(evs, e)
		}
	}
	fmt.Fprintf(&b, "\nthe last of %d clanker events:", len(evs))
	for _, e := range evs[max(0, len(evs)-12):] {
		j, _ := json.Marshal(e)
		fmt.Fprintf(&b, "\n  %s", j)
	}
	return b.String() + "\ndaemon log tail:\n" + d.LogTail()
}
