package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The attacks of issue 21 on a served repo's .clanker: whoever can write
// it (a sandboxed agent) has the daemon read what it should not. What the
// daemon read from a pod's line never goes into its event log nor its
// own log.

// marker is text no file, event or log line may hold but where the test
// put it.
func marker() string { return "zq" + strings.ReplaceAll(uuid(), "-", "") }

// leaks names every place marker got to: the daemon's event log, its own
// log, and the regular files under dirs (links are not followed).
func (d *testDaemon) leaks(marker string, dirs ...string) []string {
	d.t.Helper()
	var out []string
	if b, _ := os.ReadFile(filepath.Join(d.home, "events.ndjson")); bytes.Contains(b, []byte(marker)) {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, marker) {
				out = append(out, "events.ndjson: "+l)
			}
		}
	}
	if strings.Contains(d.stderr.String(), marker) {
		out = append(out, "the daemon's log")
	}
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(marker)) {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// A line dead-lettered, or a request refused, leaves none of its bytes in
// the event log nor the daemon's log: its length and hash say which it
// was. The dead-letter file (the pods' own lines) and state.json are
// 0600, an older looser one tightened.
func TestClankerNoLineInTheEventLog(t *testing.T) {
	t.Parallel()
	repo := shortTemp(t)
	clk := filepath.Join(repo, ".clanker")
	if err := os.MkdirAll(clk, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ipc-spool.dead.ndjson", "state.json"} {
		if err := os.WriteFile(filepath.Join(clk, f), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(clk, f), 0o644)
	}
	mark := marker()
	bad := []string{
		"not json " + mark,
		`["` + mark + `"]`,
		`{"type":{"` + mark + `":1}}`,
		`{"type":"hello","ts":["` + mark + `"]}`,
		`{"type":"` + mark + `","payload":{}}`,
		strings.TrimSpace(spoolLine("task_status", map[string]any{"taskId": mark, "status": "done"})),
		strings.TrimSpace(spoolLine("task_create", map[string]any{"task": map[string]any{"id": "a/" + mark, "prompt": "p"}})),
		strings.TrimSpace(spoolLine("task_create", map[string]any{"task": map[string]any{"id": "t1", "prompt": "p", "status": mark}})),
		strings.TrimSpace(spoolLine("heartbeat", map[string]any{"podId": mark + "/x", "pid": 1})),
	}
	for _, l := range bad {
		appendSpool(t, repo, l+"\n")
	}
	d := startDaemon(t, clankerConfig(repo, ""))
	e := d.waitEvent("clanker.spool_drained", nil)
	if e["dead"] != float64(len(bad)) {
		t.Fatalf("spool_drained %v, want %d dead", e, len(bad))
	}
	sock := filepath.Join(clk, "ipc.sock")
	got := podLines(t, sock, "not json "+mark, `{"v":"`+mark+`","type":"hello"}`, `{"v":1,"type":["`+mark+`"]}`,
		`{"v":1,"id":"x","type":"`+mark+`"}`, `{"v":1,"id":"y","type":"task_status","payload":{"taskId":"`+mark+`","status":"done"}}`,
		`{"v":1,"id":"z","type":"task_create","payload":{"task":{"id":"`+mark+`/","prompt":"p"}}}`)
	for _, a := range got {
		if !strings.Contains(a, `"ok":false`) {
			t.Fatalf("answered %s", a)
		}
	}
	// The pod hears what it sent (clanker's own words).
	if !strings.Contains(got[3], "unknown ipc type: "+mark) || !strings.Contains(got[4], "Task not found: "+mark) {
		t.Fatalf("answers %q", got)
	}
	okData(t, pod(t, sock, "usage_limit", map[string]any{"podId": "slave-1"}), `{"ok":true}`)
	d.waitEvent("clanker.paused", nil)
	var dl []map[string]any
	for _, e := range d.events() {
		if e["kind"] == "clanker.line_dead_lettered" {
			dl = append(dl, e)
		}
	}
	if len(dl) != len(bad) {
		t.Fatalf("%d line_dead_lettered, want %d", len(dl), len(bad))
	}
	for i, e := range dl {
		if e["line_bytes"] != float64(len(bad[i])) || len(e["line_sha256"].(string)) < 16 || e["error"] == "" {
			t.Errorf("line_dead_lettered %v: want the line's length (%d), a hash and an error", e, len(bad[i]))
		}
	}
	n := 0
	for _, e := range d.events() {
		if e["kind"] == "clanker.request_refused" {
			n++
		}
	}
	if n < len(got) {
		t.Fatalf("%d request_refused, want %d", n, len(got))
	}
	if l := d.leaks(mark); len(l) > 0 {
		t.Fatalf("a line's bytes got into the logs:\n%s", strings.Join(l, "\n"))
	}
	dead := filepath.Join(clk, "ipc-spool.dead.ndjson")
	if b := readFile(t, dead); strings.Count(b, mark) < len(bad) {
		t.Fatalf("the dead-letter file lost lines:\n%s", b)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(clk, "state.json"))), &st); err != nil || st["paused"] != true {
		t.Fatalf("state.json %v (%v)", st, err)
	}
}
