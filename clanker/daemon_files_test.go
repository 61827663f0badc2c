package clanker_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// The attacks of issue 21 on a served repo's .clanker: whoever can write
// it (a sandboxed agent) plants a link, a hard link or a FIFO where the
// daemon reads or writes. The daemon never reads or writes through one,
// never blocks on one, and says what it refused (clanker.file_refused).

// marker is text no file, event or log line may hold but where the test
// put it.
func marker() string { return "zq" + strings.ReplaceAll(uuid(), "-", "") }

// leaks names every place marker got to: the daemon's event log, its own
// log, and the regular files under dirs (links are not followed).
func leaks(d *daemontest.Daemon, marker string, dirs ...string) []string {
	var out []string
	if b, _ := os.ReadFile(filepath.Join(d.Home, "events.ndjson")); bytes.Contains(b, []byte(marker)) {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, marker) {
				out = append(out, "events.ndjson: "+l)
			}
		}
	}
	if strings.Contains(d.Log.String(), marker) {
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

// outsideState is what a directory outside the repo holds: each file's
// content and mtime.
type outsideState map[string]string

// snapshot describes dir and what is in it (links not followed). The
// files' times are set in the past first, so a write shows.
func snapshot(t *testing.T, dir string) outsideState {
	t.Helper()
	s := outsideState{}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{}
		if fi.Mode().IsRegular() {
			b, _ = os.ReadFile(p)
		}
		s[p] = fi.Mode().String() + " " + fi.ModTime().UTC().Format(time.RFC3339Nano) + " " + string(b)
		return nil
	})
	return s
}

// oldTimes sets the times of dir and everything in it in the past.
func oldTimes(t *testing.T, dir string) {
	t.Helper()
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil {
			os.Chtimes(p, past, past)
		}
		return nil
	})
}

func sameOutside(t *testing.T, what string, before, after outsideState) {
	t.Helper()
	for p, s := range after {
		if b, ok := before[p]; !ok {
			t.Errorf("%s: %s was made outside the repo", what, p)
		} else if b != s {
			t.Errorf("%s: %s was written: %q, was %q", what, p, s, b)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s: %s outside the repo was removed", what, p)
		}
	}
}

// refusedEvent waits for clanker.file_refused of path, its reason
// containing why.
func refusedEvent(t *testing.T, d *daemontest.Daemon, path, why string) map[string]any {
	t.Helper()
	return d.WaitEvent("clanker.file_refused", func(e map[string]any) bool {
		r, _ := e["reason"].(string)
		return e["path"] == path && strings.Contains(r, why)
	})
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// A spool linked to a secret file outside the repo (the daemon may read
// what the agent cannot) is refused, never read: nothing of the secret
// gets into the event log, the dead-letter file or anywhere in the repo.
// Once the link is gone, the pods' own spool is drained again.
func TestClankerSpoolLinkedToASecret(t *testing.T) {
	repo, outside := daemontest.ShortTemp(t), daemontest.ShortTemp(t)
	clk := filepath.Join(repo, ".clanker")
	if err := os.MkdirAll(clk, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := marker()
	secret := filepath.Join(outside, "secret")
	lines := daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": mark, "prompt": mark}}) +
		"password = " + mark + "\n" +
		daemontest.SpoolLine("task_status", map[string]any{"taskId": mark, "status": "done"}) +
		`{"type":"` + mark + `"}` + "\n"
	if err := os.WriteFile(secret, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	oldTimes(t, outside)
	before := snapshot(t, outside)
	spool := filepath.Join(clk, "ipc-spool.ndjson")
	if err := os.Symlink(secret, spool); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	refusedEvent(t, d, spool, "symbolic link")
	// The link stays as it is; once it is gone the drain goes on.
	if m := mode(t, spool); m&os.ModeSymlink == 0 {
		t.Fatalf("the spool's link became %v", m)
	}
	if err := os.Remove(spool); err != nil {
		t.Fatal(err)
	}
	appendSpool(t, repo, daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": "after", "prompt": "p"}}))
	d.WaitEvent("clanker.task_created", func(e map[string]any) bool { return e["task_id"] == "after" })
	if l := leaks(d, mark, repo); len(l) > 0 {
		t.Fatalf("the secret got out:\n%s", strings.Join(l, "\n"))
	}
	sameOutside(t, "the secret", before, snapshot(t, outside))
}

// Links planted in .clanker while the repo is served, at events.log,
// state.json, history/, heartbeat/ and tasks/: nothing outside is ever
// written, each is refused once (clanker.file_refused), the pods are
// answered, and what waited for events.log is written once the link is
// gone.
func TestClankerLinksOutOfClanker(t *testing.T) {
	repo, outside := daemontest.ShortTemp(t), daemontest.ShortTemp(t)
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	d.WaitEvent("clanker.repo_started", nil)
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	clk := filepath.Join(repo, ".clanker")
	for _, f := range []string{"events.log", "state.json", "history/task-t1-slave.md", "heartbeat/slave-1.json", "tasks/t1.json", "tasks/keep.json"} {
		p := filepath.Join(outside, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("OUTSIDE "+f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldTimes(t, outside)
	before := snapshot(t, outside)
	if err := os.RemoveAll(filepath.Join(clk, "tasks")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"events.log", "state.json", "history", "heartbeat", "tasks"} {
		os.RemoveAll(filepath.Join(clk, name))
		if err := os.Symlink(filepath.Join(outside, name), filepath.Join(clk, name)); err != nil {
			t.Fatal(err)
		}
	}
	okData(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t1", "prompt": "p"}}), `{"taskId":"t1"}`)
	okData(t, pod(t, sock, "heartbeat", map[string]any{"podId": "slave-1", "pid": 7}), `{"ok":true}`)
	okData(t, pod(t, sock, "task_handoff", map[string]any{"taskId": "t1", "role": "slave", "summary": "s"}), `{"taskId":"t1","role":"slave"}`)
	okData(t, pod(t, sock, "usage_limit", map[string]any{"podId": "slave-1"}), `{"ok":true}`)
	for _, name := range []string{"events.log", "state.json", "history", "heartbeat", "tasks"} {
		refusedEvent(t, d, filepath.Join(clk, name), "symbolic link")
	}
	// Each is said once, though the repo tries again every tick: two
	// spools drained are ticks gone by.
	okData(t, pod(t, sock, "heartbeat", map[string]any{"podId": "slave-1", "pid": 7}), `{"ok":true}`)
	for i := range 2 {
		appendSpool(t, repo, daemontest.SpoolLine("hello", map[string]any{"podId": "slave-1"}))
		daemontest.Eventually(t, 20*time.Second, "a spool drained", func() bool {
			n := 0
			for _, e := range d.Events() {
				if e["kind"] == "clanker.spool_drained" {
					n++
				}
			}
			return n > i
		}, nil)
	}
	n := map[string]int{}
	for _, e := range d.Events() {
		if e["kind"] == "clanker.file_refused" {
			n[e["path"].(string)]++
		}
	}
	for p, k := range n {
		if k != 1 {
			t.Errorf("%s refused %d times, want once", p, k)
		}
	}
	sameOutside(t, "links in .clanker", before, snapshot(t, outside))
	out, code := clankerCLI(t, d.Home, "clanker")
	if code != 0 || !strings.Contains(out, "REFUSED "+filepath.Join(clk, "events.log")+" is a symbolic link") || !strings.Contains(out, "committed and not yet in their files") {
		t.Errorf("orchestrd clanker (%d) does not show the refusals:\n%s", code, out)
	}
	// state.json's link was replaced by the daemon's own file, not
	// written through.
	if m := mode(t, filepath.Join(clk, "state.json")); !m.IsRegular() || m.Perm() != 0o600 {
		t.Errorf("state.json is %v, want a regular file, 0600", m)
	}
	// The lines for events.log waited: written once the link is gone.
	if err := os.Remove(filepath.Join(clk, "events.log")); err != nil {
		t.Fatal(err)
	}
	daemontest.Eventually(t, 20*time.Second, "events.log written after its link went", func() bool {
		b, _ := os.ReadFile(filepath.Join(clk, "events.log"))
		return strings.Contains(string(b), `"TASK_CREATED"`) && strings.Contains(string(b), `"USAGE_LIMIT"`)
	}, nil)
	sameOutside(t, "links in .clanker", before, snapshot(t, outside))
}

// A hard link at events.log to a file outside is refused (appending would
// write the outside file); FIFOs at the spool and the taken spool are
// refused without blocking the repo: its pods are answered.
func TestClankerHardLinkAndFIFOs(t *testing.T) {
	repo, outside := daemontest.ShortTemp(t), daemontest.ShortTemp(t)
	clk := filepath.Join(repo, ".clanker")
	if err := os.MkdirAll(clk, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(outside, "profile")
	if err := os.WriteFile(target, []byte("export PATH=/usr/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	oldTimes(t, outside)
	before := snapshot(t, outside)
	if err := os.Link(target, filepath.Join(clk, "events.log")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ipc-spool.ndjson", "ipc-spool.draining.ndjson"} {
		if err := syscall.Mkfifo(filepath.Join(clk, f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	sock := filepath.Join(clk, "ipc.sock")
	okData(t, pod(t, sock, "hello", map[string]any{"podId": "slave-1"}), `{"ok":true}`)
	refusedEvent(t, d, filepath.Join(clk, "ipc-spool.draining.ndjson"), "FIFO")
	okData(t, pod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": "t1", "prompt": "p"}}), `{"taskId":"t1"}`)
	refusedEvent(t, d, filepath.Join(clk, "events.log"), "2 links")
	// The taken spool's FIFO gone, the spool's own is refused in turn.
	if err := os.Remove(filepath.Join(clk, "ipc-spool.draining.ndjson")); err != nil {
		t.Fatal(err)
	}
	refusedEvent(t, d, filepath.Join(clk, "ipc-spool.ndjson"), "FIFO")
	okData(t, pod(t, sock, "hello", map[string]any{"podId": "slave-1"}), `{"ok":true}`)
	sameOutside(t, "a hard link at events.log", before, snapshot(t, outside))
}

// A line dead-lettered, or a request refused, leaves none of its bytes in
// the event log nor the daemon's log: its length and hash say which it
// was. The dead-letter file (the pods' own lines) and state.json are
// 0600, an older looser one tightened.
func TestClankerNoLineInTheEventLog(t *testing.T) {
	repo := daemontest.ShortTemp(t)
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
		strings.TrimSpace(daemontest.SpoolLine("task_status", map[string]any{"taskId": mark, "status": "done"})),
		strings.TrimSpace(daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": "a/" + mark, "prompt": "p"}})),
		strings.TrimSpace(daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": "t1", "prompt": "p", "status": mark}})),
		strings.TrimSpace(daemontest.SpoolLine("heartbeat", map[string]any{"podId": mark + "/x", "pid": 1})),
	}
	for _, l := range bad {
		appendSpool(t, repo, l+"\n")
	}
	d := daemontest.Start(t, daemontest.ClankerConfig(repo, ""))
	e := d.WaitEvent("clanker.spool_drained", nil)
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
	d.WaitEvent("clanker.paused", nil)
	var dl []map[string]any
	for _, e := range d.Events() {
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
	for _, e := range d.Events() {
		if e["kind"] == "clanker.request_refused" {
			n++
		}
	}
	if n < len(got) {
		t.Fatalf("%d request_refused, want %d", n, len(got))
	}
	if l := leaks(d, mark); len(l) > 0 {
		t.Fatalf("a line's bytes got into the logs:\n%s", strings.Join(l, "\n"))
	}
	dead := filepath.Join(clk, "ipc-spool.dead.ndjson")
	if b := testio.ReadFile(t, dead); strings.Count(b, mark) < len(bad) {
		t.Fatalf("the dead-letter file lost lines:\n%s", b)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(testio.ReadFile(t, filepath.Join(clk, "state.json"))), &st); err != nil || st["paused"] != true {
		t.Fatalf("state.json %v (%v)", st, err)
	}
}

// A repo, or its .clanker, owned by another user is not served (the
// daemon would act on it with its own rights): clanker.repo_failed and
// serve-repo say why. A file of another user in a served repo's .clanker
// is refused.
func TestClankerRepoOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a repo to another user")
	}
	theirs, theirClanker, ours := daemontest.ShortTemp(t), daemontest.ShortTemp(t), daemontest.ShortTemp(t)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(theirClanker, ".clanker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(theirClanker, ".clanker"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.ClankerConfig(theirs, "")+"\n"+daemontest.ClankerConfig(ours, ""))
	e := d.WaitEvent("clanker.repo_failed", func(e map[string]any) bool { return e["repo"] == theirs })
	if msg, _ := e["error"].(string); !strings.Contains(msg, "owned by uid 65534") {
		t.Fatalf("repo_failed %v: want it to say the owner", e)
	}
	d.WaitEvent("clanker.repo_started", func(e map[string]any) bool { return e["repo"] == ours })
	out, code := clankerCLI(t, d.Home, "clanker", "serve-repo", theirClanker)
	if code == 0 || !strings.Contains(out, "owned by uid 65534") || !strings.Contains(out, ".clanker") {
		t.Fatalf("serve-repo of a repo whose .clanker is another user's (%d): %q", code, out)
	}
	// In a repo served, a file another user gave the daemon.
	log := filepath.Join(ours, ".clanker", "events.log")
	if err := os.WriteFile(log, []byte("theirs\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(log, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	okData(t, pod(t, filepath.Join(ours, ".clanker", "ipc.sock"), "task_create", map[string]any{"task": map[string]any{"id": "t1", "prompt": "p"}}), `{"taskId":"t1"}`)
	refusedEvent(t, d, log, "owned by uid 65534")
	if b := testio.ReadFile(t, log); b != "theirs\n" {
		t.Fatalf("another user's events.log was written: %q", b)
	}
}
