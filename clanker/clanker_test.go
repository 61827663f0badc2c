package clanker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/spool"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// openTestDir opens dir as a repo's .clanker is: beneath, the daemon's
// uid the only owner.
func openTestDir(t *testing.T, dir string) *beneath.Dir {
	t.Helper()
	d, err := beneath.OpenRoot(dir, beneath.Options{Owners: []int{os.Geteuid()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// A record keeps its members' order and the ones it does not know, and
// writes a file as JSON.stringify(task, null, 2) does.
func TestRecordKeepsOrder(t *testing.T) {
	r, err := parseRecord([]byte(`{"id":"t1","zeta":{"b":1,"a":[1,2]},"status":"queued","id":"t1b"}`))
	if err != nil {
		t.Fatal(err)
	}
	r.setString("prompt", "<p> & \"q\"")
	r.del("zeta")
	want := "{\n  \"id\": \"t1b\",\n  \"status\": \"queued\",\n  \"prompt\": \"<p> & \\\"q\\\"\"\n}"
	if got := string(r.file()); got != want {
		t.Fatalf("file:\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{`[]`, `{"a":1} {}`, `{"a":`, ``} {
		if _, err := parseRecord([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestValidTask(t *testing.T) {
	for _, tc := range []struct{ task, err string }{
		{`{"id":"t1","prompt":"p","status":"queued","ownerDirs":["src"],"usage":{"tokens":1,"cost":0}}`, ""},
		{`{"prompt":"p","status":"queued"}`, "missing id"},
		{`{"id":"t1","status":"queued"}`, "missing prompt"},
		{`{"id":"t1","prompt":"p","status":"later"}`, `invalid status "later"`},
		{`{"id":"a/b","prompt":"p","status":"done"}`, "invalid id"},
		{`{"id":"t1","prompt":"p","status":"done","ownerFiles":[""]}`, "invalid ownerFiles"},
		{`{"id":"t1","prompt":"p","status":"done","ownerDirs":"src"}`, "invalid ownerDirs"},
		{`{"id":"t1","prompt":"p","status":"done","usage":{"tokens":"1","cost":0}}`, "invalid usage.tokens"},
		{`{"id":"t1","prompt":"p","status":"done","resumeSlaveId":3}`, "invalid resumeSlaveId"},
	} {
		r, err := parseRecord([]byte(tc.task))
		if err != nil {
			t.Fatal(err)
		}
		err = validTask(r)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.task, err, tc.err)
		}
	}
}

// An outbox replayed after a kill appends only the entries its files do
// not already end with.
func TestRecoverOutbox(t *testing.T) {
	dir := t.TempDir()
	d := openTestDir(t, dir)
	log, dead := filepath.Join(dir, "events.log"), filepath.Join(dir, "dead.ndjson")
	os.WriteFile(log, []byte("old\na\nb\n"), 0o644)
	out := []state.ClankerLine{
		{Seq: 1, File: log, Data: "a\n"}, {Seq: 2, File: log, Data: "b\n"}, {Seq: 3, File: dead, Data: "x\n"},
		{Seq: 4, File: log, Data: "c\n"}, {Seq: 5, File: filepath.Join(dir, "h.md"), Replace: true, Data: "h"},
	}
	var seqs []int64
	for _, l := range recoverOutbox(d, dir, out) {
		seqs = append(seqs, l.Seq)
	}
	if len(seqs) != 3 || seqs[0] != 3 || seqs[1] != 4 || seqs[2] != 5 {
		t.Fatalf("kept %v, want [3 4 5]", seqs)
	}
	// Appending to a file whose last line lost its newline keeps lines.
	os.WriteFile(dead, []byte("cut"), 0o644)
	if err := appendLines(d, "dead.ndjson", []byte("x\n"), 0o644, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dead); string(b) != "cut\nx\n" {
		t.Fatalf("dead file %q", b)
	}
}

// The writers of .clanker never write through a link, a hard link or a
// FIFO, never block on one, and name what they refused relative to the
// directory they were given.
func TestFilesNeverFollow(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	d := openTestDir(t, dir)
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("SECRET\n"), 0o600)
	os.Mkdir(filepath.Join(outside, "dir"), 0o755)
	os.Symlink(secret, filepath.Join(dir, "events.log"))
	os.Link(secret, filepath.Join(dir, "hard.log"))
	syscall.Mkfifo(filepath.Join(dir, "fifo.log"), 0o600)
	os.Symlink(filepath.Join(outside, "dir"), filepath.Join(dir, "history"))
	os.Mkdir(filepath.Join(dir, "tasks"), 0o755)
	os.Symlink(filepath.Join(outside, "dir"), filepath.Join(dir, "tasks", "sub"))
	refused := func(err error, path, reason string) {
		t.Helper()
		var re *beneath.RefusedError
		if !errors.As(err, &re) || re.Path != path || !strings.Contains(re.Reason, reason) {
			t.Fatalf("%v: want %s refused, %q", err, path, reason)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		refused(appendLines(d, "events.log", []byte("x\n"), 0o644, true), "events.log", "symbolic link")
		refused(appendLines(d, "hard.log", []byte("x\n"), 0o644, true), "hard.log", "2 links")
		refused(appendLines(d, "fifo.log", []byte("x\n"), 0o644, true), "fifo.log", "FIFO")
		refused(writeFile(d, "history/task-t1-slave.md", []byte("x"), 0o644, false), "history", "symbolic link")
		refused(writeFile(d, "tasks/sub/t.json", []byte("x"), 0o644, false), "tasks/sub", "symbolic link")
		ws := []*fileWrite{{rel: "history/a.md", data: []byte("x")}, {rel: "tasks/ok.json", data: []byte("ok")}, {rel: "tasks/sub/b.json", data: []byte("x")}}
		writeAll(d, ws, 0o644, true)
		refused(ws[0].err, "history", "symbolic link")
		refused(ws[2].err, "tasks/sub", "symbolic link")
		if ws[1].err != nil {
			t.Errorf("tasks/ok.json: %v", ws[1].err)
		}
		if n := appended(d, "fifo.log", [][]byte{[]byte("x\n")}); n != 0 {
			t.Errorf("appended to a FIFO: %d", n)
		}
		// A replace puts a file in the link's place; the target is not
		// written.
		if err := writeFile(d, "events.log", []byte("mine\n"), 0o600, true); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked on a FIFO")
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET\n" {
		t.Fatalf("the secret was written: %q", b)
	}
	if ents, _ := os.ReadDir(filepath.Join(outside, "dir")); len(ents) != 0 {
		t.Fatalf("files were made outside: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tasks", "ok.json")); string(b) != "ok" {
		t.Fatalf("tasks/ok.json: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "events.log")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("events.log after a replace: %v %v", fi, err)
	}
}

// An append makes the file with its mode and tightens a looser one (on
// its descriptor); it never loosens one.
func TestAppendTightens(t *testing.T) {
	dir := t.TempDir()
	d := openTestDir(t, dir)
	for name, tc := range map[string]struct{ before, perm, want os.FileMode }{
		"dead.ndjson":  {0o644, 0o600, 0o600},
		"loose.log":    {0o666, 0o644, 0o644},
		"private.log":  {0o600, 0o644, 0o600},
		"new.ndjson":   {0, 0o600, 0o600},
		"events.log":   {0, 0o644, 0o644},
		"odd.log":      {0o604, 0o640, 0o600},
		"exec.ndjson":  {0o755, 0o600, 0o600},
		"group.ndjson": {0o660, 0o600, 0o600},
	} {
		p := filepath.Join(dir, name)
		if tc.before != 0 {
			os.WriteFile(p, []byte("old\n"), tc.before)
			os.Chmod(p, tc.before)
		}
		if err := appendLines(d, name, []byte("x\n"), tc.perm, false); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(p)
		if got := fi.Mode().Perm(); got != tc.want&^umask() && got != tc.want {
			t.Errorf("%s (%v, appended as %v) is %v, want %v", name, tc.before, tc.perm, got, tc.want)
		}
	}
}

func umask() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}

// A prompt file in the repo is read beneath it: a link or a FIFO there is
// refused (the link's target would be handed to the pods), when the repo
// starts; one outside the repo is the operator's path.
func TestPromptFileInTheRepo(t *testing.T) {
	repo, outside := t.TempDir(), t.TempDir()
	os.Mkdir(filepath.Join(repo, ".clanker"), 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o600)
	os.WriteFile(filepath.Join(outside, "prompt.md"), []byte("outside prompt"), 0o600)
	os.WriteFile(filepath.Join(repo, ".clanker", "base.md"), []byte("base"), 0o600)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(repo, ".clanker", "judge.md"))
	syscall.Mkfifo(filepath.Join(repo, ".clanker", "fifo.md"), 0o600)
	c := RepoConfig{Path: repo, BasePromptFile: filepath.Join(repo, ".clanker", "base.md"), JudgePromptFile: filepath.Join(outside, "prompt.md")}
	if base, judge, err := c.prompts(); err != nil || base != "base" || judge != "outside prompt" {
		t.Fatalf("prompts: %q %q %v", base, judge, err)
	}
	for _, f := range []string{"judge.md", "fifo.md"} {
		c.JudgePromptFile = filepath.Join(repo, ".clanker", f)
		if _, judge, err := c.prompts(); !errors.Is(err, beneath.ErrRefused) || judge != "" {
			t.Fatalf("%s: %q, %v; want refused", f, judge, err)
		}
		// The config is valid: the repo's start reads it (repo_failed).
		if errs := ValidateRepo(c); len(errs) != 0 {
			t.Fatalf("%s: ValidateRepo %v", f, errs)
		}
	}
}

// A file refused keeps its lines, in order, and the other files go on;
// the markers say what was written: up to a seq, and past it one by one.
// The refusal is said once, and again only once the file was served.
func TestFlushOutboxWaitsPerFile(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	seen := &eventsSeen{}
	bus, err := eventlog.Open(eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	defer bus.Subscribe([]string{"clanker.*"}, seen)()
	r := &repo{m: &Manager{log: zerolog.Nop(), now: time.Now, bus: bus}, name: filepath.Dir(dir), dir: dir, refused: map[string]string{}}
	d := openTestDir(t, dir)
	target := filepath.Join(outside, "log")
	os.WriteFile(target, nil, 0o600)
	os.Symlink(target, filepath.Join(dir, eventsName))
	line := func(seq int64, file, data string, replace bool) state.ClankerLine {
		return state.ClankerLine{Seq: seq, File: filepath.Join(dir, file), Data: data, Replace: replace}
	}
	r.outbox = []state.ClankerLine{line(1, spool.DeadName, "d1\n", false), line(2, eventsName, "e2\n", false), line(3, eventsName, "e3\n", false),
		line(4, spool.DeadName, "d4\n", false), line(5, "history/h.md", "h5", true), line(6, eventsName, "e6\n", false)}
	done, written := r.flushOutbox(d)
	if done != 1 || fmt.Sprint(written) != "[4 5]" {
		t.Fatalf("done %d, written %v; want 1, [4 5]", done, written)
	}
	if fmt.Sprint(seqs(r.outbox)) != "[2 3 6]" {
		t.Fatalf("kept %v, want [2 3 6]", seqs(r.outbox))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, spool.DeadName)); string(b) != "d1\nd4\n" {
		t.Fatalf("dead-letter file %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, spool.DeadName)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("dead-letter file %v", fi.Mode())
	}
	r.flushOutbox(d)
	if n := seen.count("clanker.file_refused"); n != 1 {
		t.Fatalf("%d file_refused for one refusal met twice", n)
	}
	os.Remove(filepath.Join(dir, eventsName))
	done, written = r.flushOutbox(d)
	if done != 6 || len(written) != 0 || len(r.outbox) != 0 {
		t.Fatalf("after the link went: done %d, written %v, kept %v", done, written, seqs(r.outbox))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, eventsName)); string(b) != "e2\ne3\ne6\n" {
		t.Fatalf("events.log %q", b)
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Fatalf("written through the link: %q", b)
	}
	// Served again: a new link is said again.
	os.Remove(filepath.Join(dir, eventsName))
	os.Symlink(target, filepath.Join(dir, eventsName))
	r.outbox = []state.ClankerLine{line(7, eventsName, "e7\n", false)}
	r.flushOutbox(d)
	if n := seen.count("clanker.file_refused"); n != 2 {
		t.Fatalf("%d file_refused, want 2 (the link came back)", n)
	}
}

func seqs(out []state.ClankerLine) []int64 {
	var s []int64
	for _, l := range out {
		s = append(s, l.Seq)
	}
	return s
}

// eventsSeen is a subscriber that counts the kinds it was delivered.
type eventsSeen struct {
	mu    sync.Mutex
	kinds []string
}

func (e *eventsSeen) Deliver(r *eventlog.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, r.Kind)
}

func (e *eventsSeen) count(kind string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, k := range e.kinds {
		if k == kind {
			n++
		}
	}
	return n
}
