package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

var ctx = context.Background()

func usec(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

func fullSpec() api.JobSpec {
	return api.JobSpec{Lane: "", Command: "sh", Argv: []string{"-c", `echo "a < b" && printf 'é\n'`}, Cwd: "/tmp/w",
		WorktreeDir: "/tmp/wt", Env: map[string]string{"A": "1", "B": "x=y", "ÜNI": "ç"}, TimeoutMs: 30000,
		MaxOutputBytes: 1 << 20, FilePaths: []string{"a.go", "b/c.go"}, AgentID: "agent-7", ToolName: "bash",
		Stdin: "line one\nline two\n", StdinB64: []byte{0, 1, 2, 0xff, 0xfe}, KillGraceMs: graceMs(2500), StdinStream: true,
		Secrets: map[string]string{"ANTHROPIC_API_KEY": "anthropic", "TOKEN": "TOKEN"}}
}

func graceMs(v uint64) *uint64 { return &v }

func submitted(id, lane string, spec api.JobSpec, at time.Time) api.JobRecord {
	return api.JobRecord{ID: id, Lane: lane, State: api.StateQueued, Command: spec.Command, Argv: spec.Argv,
		Cwd: spec.Cwd, CreatedAt: at}
}

func TestJobLifecycleRoundTrip(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	jobs := s.Jobs()
	spec := fullSpec()
	created := time.Now()
	rec := submitted("j-1", "net", spec, created)
	if err := jobs.Submit(ctx, rec, spec); err != nil {
		t.Fatal(err)
	}
	got, ok, err := jobs.Get("j-1")
	if err != nil || !ok {
		t.Fatalf("Get after Submit: %v %v", ok, err)
	}
	want := rec
	want.CreatedAt = usec(created)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("queued record:\n got %+v\nwant %+v", got, want)
	}

	un, err := jobs.Unfinished()
	if err != nil || len(un) != 1 {
		t.Fatalf("Unfinished: %v %v", un, err)
	}
	wantSpec := spec
	wantSpec.Lane = "net"
	if !reflect.DeepEqual(un[0].Spec, wantSpec) {
		t.Fatalf("spec:\n got %+v\nwant %+v", un[0].Spec, wantSpec)
	}
	if un[0].MayHaveRun() {
		t.Fatal("a queued job may not have run")
	}

	disp := time.Now()
	if err := jobs.Dispatch(ctx, "j-1", "net-0", 4242, disp); err != nil {
		t.Fatal(err)
	}
	un, _ = jobs.Unfinished()
	if len(un) != 1 || !un[0].MayHaveRun() || un[0].Record.State != api.StateDispatched ||
		un[0].Record.RunnerID != "net-0" || un[0].Record.RunnerPid != 4242 || !un[0].Record.DispatchedAt.Equal(usec(disp)) {
		t.Fatalf("after Dispatch: %+v", un)
	}
	// A bounced job goes back to the queue: no runner saw it.
	if err := jobs.Requeue(ctx, "j-1"); err != nil {
		t.Fatal(err)
	}
	un, _ = jobs.Unfinished()
	if len(un) != 1 || un[0].MayHaveRun() || un[0].Record.RunnerID != "" || un[0].Record.DispatchedAt != nil {
		t.Fatalf("after Requeue: %+v", un)
	}
	if err := jobs.Dispatch(ctx, "j-1", "net-1", 4343, disp); err != nil {
		t.Fatal(err)
	}
	if err := jobs.Run(ctx, "j-1"); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := jobs.Get("j-1"); got.State != api.StateRunning {
		t.Fatalf("after Run: %s", got.State)
	}

	fin := time.Now()
	code := int32(3)
	d := usec(disp)
	final := api.JobRecord{ID: "j-1", Lane: "net", RunnerID: "net-1", RunnerPid: 4343, State: api.StateFailed,
		ExitCode: &code, Output: "out\x00put\xff", DurationMs: 1234, Error: "boom", Command: spec.Command,
		Argv: spec.Argv, Cwd: spec.Cwd, CreatedAt: created, DispatchedAt: &d, FinishedAt: &fin,
		OutputBytes: 99999, OutputTruncated: true, WasTimeout: true, WasCancelled: true, StoppedBy: "sigkill", OutputCut: true}
	if err := jobs.Finish(ctx, final); err != nil {
		t.Fatal(err)
	}
	got, _, _ = jobs.Get("j-1")
	want = final
	want.CreatedAt = usec(created)
	f := usec(fin)
	want.FinishedAt = &f
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("finished record:\n got %+v\nwant %+v", got, want)
	}
	if un, _ := jobs.Unfinished(); len(un) != 0 {
		t.Fatalf("a finished job is still unfinished: %+v", un)
	}

	// The file and its WAL are the daemon's user's alone: specs hold
	// environments.
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}

	// A signal, no exit code; and it survives closing and reopening.
	sig := api.JobRecord{ID: "j-2", Lane: "net", State: api.StateFailed, Signal: "SIGSEGV"}
	if err := jobs.Submit(ctx, submitted("j-2", "net", api.JobSpec{Command: "x"}, created), api.JobSpec{Command: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := jobs.Finish(ctx, sig); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, path, testOpts)
	got2, ok, err := s.Jobs().Get("j-2")
	if err != nil || !ok || got2.ExitCode != nil || got2.Signal != "SIGSEGV" || got2.FinishedAt == nil {
		t.Fatalf("after reopen: %+v %v %v", got2, ok, err)
	}
	if got, _, _ := s.Jobs().Get("j-1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, want)
	}
}

// Output is bytes: every byte a job wrote comes back, NULs, invalid UTF-8
// and all, and sqlite3 sees a BLOB.
func TestOutputBytesRoundTrip(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	rng := rand.New(rand.NewPCG(1, 2))
	outs := map[string][]byte{}
	for i, n := range []int{0, 1, 2, 255, 4096, 100_000, 1 << 20} {
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(rng.UintN(256))
		}
		if n == 2 {
			b = []byte{0xc3, 0x28} // invalid UTF-8
		}
		id := fmt.Sprintf("j-%d", i)
		outs[id] = b
		if err := s.Jobs().Submit(ctx, submitted(id, "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Jobs().Finish(ctx, api.JobRecord{ID: id, State: api.StateSucceeded, Output: string(b),
			OutputBytes: int64(n)}); err != nil {
			t.Fatal(err)
		}
	}
	for id, b := range outs {
		got, _, err := s.Jobs().Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(got.Output), b) || got.OutputBytes != int64(len(b)) {
			t.Fatalf("%s: output of %d bytes came back as %d bytes, differing", id, len(b), len(got.Output))
		}
	}
	// The stdin of a queued job too, as big as it may be.
	stdin := make([]byte, api.MaxStdinBytes)
	for k := range stdin {
		stdin[k] = byte(rng.UintN(256))
	}
	spec := api.JobSpec{StdinB64: stdin, Stdin: "text \xff\x00 not UTF-8"}
	if err := s.Jobs().Submit(ctx, submitted("j-in", "net", spec, time.Now()), spec); err != nil {
		t.Fatal(err)
	}
	if err := s.Jobs().Run(ctx, "j-in"); err != nil {
		t.Fatal(err)
	}
	un, err := s.Jobs().Unfinished()
	if err != nil || len(un) != 1 || !bytes.Equal(un[0].Spec.StdinB64, stdin) || un[0].Spec.Stdin != spec.Stdin {
		t.Fatalf("stdin did not come back whole (%d jobs, %v)", len(un), err)
	}

	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("no sqlite3 tool to look at the column types with")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sqlite3", path, "select id, typeof(output), length(output), hex(substr(output, 1, 2)) from jobs where id = 'j-2'").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "j-2|blob|2|C328" {
		t.Fatalf("sqlite3 says %q (%v), want j-2|blob|2|C328", out, err)
	}
}

// The tables are plain columns a person reads with the sqlite3 tool.
func TestReadableWithSqlite3(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("no sqlite3 tool (apt-get install sqlite3)")
	}
	path := dbPath(t)
	s := openT(t, path, testOpts)
	spec := api.JobSpec{Command: "make", Argv: []string{"test", "-j2"}, Env: map[string]string{"GOFLAGS": "-race"}}
	at := time.Date(2025, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	if err := s.Jobs().Submit(ctx, submitted("j-9", "heavy", spec, at), spec); err != nil {
		t.Fatal(err)
	}
	sqlite3 := func(query string) string {
		t.Helper()
		out, err := exec.Command("sqlite3", "-separator", " | ", path, query).CombinedOutput()
		if err != nil {
			t.Fatalf("sqlite3 %q: %v\n%s", query, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got, want := sqlite3("select id, state, env from jobs join job_specs using (seq)"), `j-9 | queued | {"GOFLAGS":"-race"}`; got != want {
		t.Fatalf("a queued job's spec: sqlite3 says\n%s\nwant\n%s", got, want)
	}
	code := int32(2)
	if err := s.Jobs().Finish(ctx, api.JobRecord{ID: "j-9", State: api.StateFailed, ExitCode: &code, FinishedAt: &at}); err != nil {
		t.Fatal(err)
	}
	got := sqlite3("select id, lane, state, exit_code, created_at, finished_at, command, argv from jobs")
	want := `j-9 | heavy | failed | 2 | 2025-03-04T05:06:07.891000Z | 2025-03-04T05:06:07.891000Z | make | ["test","-j2"]`
	if got != want {
		t.Fatalf("sqlite3 says\n%s\nwant\n%s", got, want)
	}
	if got := sqlite3("select count(*) from job_specs"); got != "0" {
		t.Fatalf("a finished job kept its spec: %s rows", got)
	}
	if got := sqlite3("select key from meta order by key"); got != "node_id\nopened_at" {
		t.Fatalf("meta keys: %q", got)
	}
}

func TestWriteErrors(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	jobs := s.Jobs()
	if err := jobs.Submit(ctx, submitted("j-1", "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		is   error
		says string
	}{
		{"duplicate submit", jobs.Submit(ctx, submitted("j-1", "net", api.JobSpec{}, time.Now()), api.JobSpec{}), ErrExists, "record job j-1 submitted: already recorded"},
		{"dispatch unknown", jobs.Dispatch(ctx, "j-404", "r", 1, time.Now()), ErrNotFound, "record job j-404 dispatched: not recorded"},
		{"finish unknown", jobs.Finish(ctx, api.JobRecord{ID: "j-404", State: api.StateFailed}), ErrNotFound, "not recorded"},
		{"finish not terminal", jobs.Finish(ctx, api.JobRecord{ID: "j-1", State: api.StateRunning}), nil, `"running" is not a terminal state`},
		{"no id", jobs.Submit(ctx, api.JobRecord{Lane: "net"}, api.JobSpec{}), nil, "the job has no id"},
		{"no lane", jobs.Submit(ctx, api.JobRecord{ID: "j-2"}, api.JobSpec{}), nil, "the job has no lane"},
		{"submit not queued", jobs.Submit(ctx, api.JobRecord{ID: "j-2", Lane: "net", State: api.StateRunning}, api.JobSpec{}), nil, "a submitted job is queued, not running"},
		{"argv not UTF-8", jobs.Submit(ctx, submitted("j-2", "net", api.JobSpec{}, time.Now()), api.JobSpec{Argv: []string{"ok", "\xff"}}), nil, "argv[1] is not valid UTF-8"},
		{"huge timeout", jobs.Submit(ctx, submitted("j-2", "net", api.JobSpec{}, time.Now()), api.JobSpec{TimeoutMs: 1 << 63}), nil, "timeout_ms 9223372036854775808 is too large"},
		{"empty meta key", s.Meta().Set(ctx, "", "x"), nil, "empty key"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.says) || !strings.Contains(c.err.Error(), s.Path()) ||
			(c.is != nil && !errors.Is(c.err, c.is)) {
			t.Errorf("%s: error %v, want one naming the file and saying %q", c.name, c.err, c.says)
		}
	}
	if _, ok, _ := jobs.Get("j-2"); ok {
		t.Fatal("a refused submission was recorded")
	}
	fin := api.JobRecord{ID: "j-1", Lane: "net", State: api.StateCancelled}
	if err := jobs.Finish(ctx, fin); err != nil {
		t.Fatal(err)
	}
	fin.State = api.StateSucceeded
	if err := jobs.Finish(ctx, fin); !errors.Is(err, ErrFinished) {
		t.Fatalf("second Finish: %v, want ErrFinished", err)
	}
	if err := jobs.Run(ctx, "j-1"); !errors.Is(err, ErrFinished) {
		t.Fatalf("Run after Finish: %v, want ErrFinished", err)
	}
	if got, _, _ := jobs.Get("j-1"); got.State != api.StateCancelled {
		t.Fatalf("a finished job changed: %s", got.State)
	}
	// Bad input never reached the writer; the three refusals above and
	// these two did. The writes: the open's, j-1 submitted and finished.
	if st := s.Stats(); st.Failed != 5 || st.Writes != 3 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := jobs.Run(ctx, "j-1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
	if err := s.Enqueue(JobRunning("j-1"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestListPaging(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	jobs := s.Jobs()
	t0 := time.Now().Add(-time.Hour)
	var ws []Write
	lanes := []string{"net", "no-net", "heavy"}
	for i := 1; i <= 25; i++ {
		lane := lanes[i%3]
		id := fmt.Sprintf("j-%02d", i)
		ws = append(ws, JobSubmitted(submitted(id, lane, api.JobSpec{}, t0.Add(time.Duration(i)*time.Minute)), api.JobSpec{}))
		if i%2 == 0 {
			ws = append(ws, JobFinished(api.JobRecord{ID: id, State: api.StateSucceeded, Output: "big output"}))
		}
	}
	if err := s.Do(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	ids := func(p Page) string {
		var b []string
		for _, r := range p.Jobs {
			if r.Output != "" {
				t.Errorf("List returned output for %s", r.ID)
			}
			b = append(b, strings.TrimPrefix(r.ID, "j-"))
		}
		return strings.Join(b, " ")
	}
	all := func(q Query) []string {
		var pages []string
		for {
			p, err := jobs.List(q)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, ids(p))
			if p.Next == "" {
				return pages
			}
			if len(pages) > 10 {
				t.Fatal("paging does not end")
			}
			q.Cursor = p.Next
		}
	}
	check := func(name string, got []string, want ...string) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	check("oldest first by 10", all(Query{Limit: 10}),
		"01 02 03 04 05 06 07 08 09 10", "11 12 13 14 15 16 17 18 19 20", "21 22 23 24 25")
	check("newest first by 10", all(Query{Limit: 10, Newest: true}),
		"25 24 23 22 21 20 19 18 17 16", "15 14 13 12 11 10 09 08 07 06", "05 04 03 02 01")
	check("exactly one page", all(Query{Limit: 25}), "01 02 03 04 05 06 07 08 09 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25")
	check("no limit", all(Query{State: "queued"}), "01 03 05 07 09 11 13 15 17 19 21 23 25")
	check("lane and state", all(Query{Lane: "net", State: "succeeded", Limit: 2}), "06 12", "18 24")
	check("since", all(Query{Since: t0.Add(20 * time.Minute), Limit: 4, Newest: true}), "25 24 23 22", "21 20")
	check("nothing", all(Query{Lane: "nope"}), "")

	for _, q := range []Query{{State: "bogus"}, {Cursor: "x1"}, {Cursor: "-3"}, {Limit: -1}} {
		if _, err := jobs.List(q); err == nil {
			t.Errorf("List(%+v) took it", q)
		}
	}
	if _, err := jobs.List(Query{State: "bogus"}); err == nil || !strings.Contains(err.Error(), `unknown state "bogus"`) {
		t.Errorf("bad state: %v", err)
	}
}

func TestPrune(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	jobs := s.Jobs()
	t0 := time.Now().Add(-48 * time.Hour)
	var ws []Write
	const n = 1300 // more than two prune chunks
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("j-%04d", i)
		ws = append(ws, JobSubmitted(submitted(id, "net", api.JobSpec{}, t0), api.JobSpec{}))
		if i%100 == 0 {
			continue // stays unfinished
		}
		// Finished in reverse order of submission: the job submitted last
		// finished first.
		at := t0.Add(time.Duration(n-i) * time.Minute)
		ws = append(ws, JobFinished(api.JobRecord{ID: id, State: api.StateSucceeded, FinishedAt: &at}))
	}
	if err := s.Do(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	count := func(q Query) int {
		p, err := jobs.List(q)
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Jobs)
	}
	// Age: every job finished before t0+1000m goes: those submitted after
	// j-0300, but for the unfinished ones.
	deleted, err := jobs.Prune(ctx, 0, t0.Add(1000*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 990 || count(Query{}) != 310 {
		t.Fatalf("age prune deleted %d, %d left", deleted, count(Query{}))
	}
	if _, ok, _ := jobs.Get("j-0301"); ok {
		t.Fatal("j-0301 finished before the cutoff and is still there")
	}
	if _, ok, _ := jobs.Get("j-0300"); !ok {
		t.Fatal("j-0300 finished at the cutoff and was pruned")
	}
	if _, ok, _ := jobs.Get("j-1200"); !ok {
		t.Fatal("an unfinished job was pruned")
	}
	// Count: the 100 most recently finished stay (j-0001..j-0101, but
	// j-0100, which is unfinished), and every unfinished one.
	deleted, err = jobs.Prune(ctx, 100, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	finished := count(Query{State: "succeeded"})
	if finished != 100 || count(Query{State: "queued"}) != n/100 || deleted != 197 {
		t.Fatalf("count prune deleted %d: %d finished and %d queued left", deleted, finished, count(Query{State: "queued"}))
	}
	p, _ := jobs.List(Query{State: "succeeded", Limit: 1, Newest: true})
	if p.Jobs[0].ID != "j-0101" {
		t.Fatalf("newest finished kept should be the latest-finished ones; the last submitted left is %s", p.Jobs[0].ID)
	}
	p, _ = jobs.List(Query{State: "succeeded", Limit: 1})
	if p.Jobs[0].ID != "j-0001" {
		t.Fatalf("the job that finished last (j-0001) was pruned; oldest left is %s", p.Jobs[0].ID)
	}
	if deleted, err := jobs.Prune(ctx, 100, t0); err != nil || deleted != 0 {
		t.Fatalf("nothing more to prune: %d %v", deleted, err)
	}
}

func TestMeta(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	node := s.NodeID()
	if len(node) != 32 {
		t.Fatalf("node id %q", node)
	}
	m := s.Meta()
	if _, ok, err := m.Get("x"); ok || err != nil {
		t.Fatalf("Get of nothing: %v %v", ok, err)
	}
	if err := m.Set(ctx, "x", "1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "x", "two"); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := m.Get("x"); v != "two" || !ok || err != nil {
		t.Fatalf("Get: %q %v %v", v, ok, err)
	}
	first, err := m.Reserve(ctx, "eventlog.seq", 1000)
	if err != nil || first != 1 {
		t.Fatalf("first reserve: %d %v", first, err)
	}
	if first, err = m.Reserve(ctx, "eventlog.seq", 10); err != nil || first != 1001 {
		t.Fatalf("second reserve: %d %v", first, err)
	}
	if _, err := m.Reserve(ctx, "x", 1); err == nil || !strings.Contains(err.Error(), `counter holds "two"`) {
		t.Fatalf("reserve from a value that is not a count: %v", err)
	}
	if _, err := m.Reserve(ctx, "y", 0); err == nil {
		t.Fatal("reserved nothing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, path, testOpts)
	if s.NodeID() != node {
		t.Fatalf("node id changed across reopen: %s -> %s", node, s.NodeID())
	}
	if first, err := s.Meta().Reserve(ctx, "eventlog.seq", 5); err != nil || first != 1011 {
		t.Fatalf("reserve after reopen: %d %v, want 1011", first, err)
	}
}

// The read path of a finished job's output: each record owns its bytes
// (none alias the driver's buffer, which the next read reuses), readers
// read while the writer commits, an unknown id is not found, and a closed
// store says so.
func TestGetOutputReadPath(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	const n = 12
	want := make([]string, n)
	finish := func(i int) {
		t.Helper()
		id := fmt.Sprintf("j-%d", i)
		b := bytes.Repeat([]byte{byte(i), 0xff, '\n', byte('a' + i)}, 64<<10+i) // 256 KiB and more, not UTF-8
		want[i] = string(b)
		if err := s.Jobs().Submit(ctx, submitted(id, "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Jobs().Finish(ctx, api.JobRecord{ID: id, State: api.StateSucceeded, Output: want[i], OutputBytes: int64(len(b))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n / 2 {
		finish(i)
	}
	var got []api.JobRecord
	for i := range n / 2 {
		r, ok, err := s.Jobs().Get(fmt.Sprintf("j-%d", i))
		if err != nil || !ok {
			t.Fatalf("j-%d: %v %v", i, ok, err)
		}
		got = append(got, r)
	}
	// Readers while the writer commits the rest.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for k := range 40 {
				i := (g + k) % (n / 2)
				r, ok, err := s.Jobs().Get(fmt.Sprintf("j-%d", i))
				if err != nil || !ok || r.Output != want[i] {
					errs <- fmt.Errorf("j-%d: found %v, %d bytes, %v", i, ok, len(r.Output), err)
					return
				}
			}
		})
	}
	for i := n / 2; i < n; i++ {
		finish(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, r := range got {
		if r.Output != want[i] || r.OutputBytes != int64(len(want[i])) || r.State != api.StateSucceeded {
			t.Fatalf("j-%d read first changed after later reads: %d bytes", i, len(r.Output))
		}
	}
	if _, ok, err := s.Jobs().Get("j-none"); ok || err != nil {
		t.Fatalf("an unknown job: found %v, %v", ok, err)
	}
	s.Close()
	if _, ok, err := s.Jobs().Get("j-0"); ok || err == nil || !strings.Contains(err.Error(), "read job j-0") {
		t.Fatalf("a closed store: found %v, %v", ok, err)
	}
}

// A finished job's spec leaves no bytes in the file: the page its row was
// in is rewritten with the row's space zeroed (secure_delete FAST), so
// an env value is not in state.db once the job ended and the WAL was
// checkpointed (here by closing the store).
func TestFinishedSpecLeavesNoBytes(t *testing.T) {
	const canary = "env-canary-5e0c1d77"
	path := dbPath(t)
	s, err := Open(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	jobs := s.Jobs()
	spec := api.JobSpec{Command: "sh", Env: map[string]string{"TOKEN": canary}}
	for i := range 3 {
		id := fmt.Sprintf("j-%d", i)
		if err := jobs.Submit(ctx, submitted(id, "net", spec, time.Now()), spec); err != nil {
			t.Fatal(err)
		}
		code := int32(0)
		if err := jobs.Finish(ctx, api.JobRecord{ID: id, Lane: "net", State: api.StateSucceeded, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s holds a finished job's env value", p)
		}
	}
}

// A running job's output streamed in pieces (JobOutputStreamed) is what
// JobLost puts in its record, byte for byte, with the count it wrote; a
// job's end (JobFinished) and its pruning leave no piece behind; a piece of
// a finished job changes nothing.
func TestStreamedOutputKeptWhenLost(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	jobs := s.Jobs()
	for _, id := range []string{"j-lost", "j-done", "j-capped"} {
		if err := jobs.Submit(ctx, submitted(id, "net", api.JobSpec{Command: "x"}, time.Now()), api.JobSpec{Command: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := jobs.Run(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	first, second := []byte("line 0\nbinary \x00\xff\n"), []byte("line 2\n")
	ws := []Write{JobOutputStreamed("j-lost", 0, first, int64(len(first))),
		JobOutputStreamed("j-lost", int64(len(first)), second, int64(len(first)+len(second))),
		JobOutputStreamed("j-done", 0, []byte("done's"), 6),
		JobOutputStreamed("j-capped", 0, []byte("abc"), 3),
		JobOutputStreamed("j-capped", 3, nil, 500), // past the cap: only the count grows
		JobOutputStreamed("j-capped", 3, nil, 900)}
	if err := s.Do(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	if err := s.Do(ctx, JobOutputStreamed("j-lost", 5, []byte("x"), 1)); err == nil {
		t.Fatal("a piece past the count it carries was taken")
	}
	if err := jobs.Finish(ctx, api.JobRecord{ID: "j-done", State: api.StateSucceeded, Output: "whole", OutputBytes: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.Do(ctx, JobOutputStreamed("j-done", 6, []byte("late"), 10)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"j-lost", "j-capped"} {
		if err := s.Do(ctx, JobLost(api.JobRecord{ID: id, State: api.StateFailed, Error: api.ErrDaemonLost, FinishedAt: &now})); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]api.JobRecord{
		"j-lost":   {Output: string(first) + string(second), OutputBytes: int64(len(first) + len(second))},
		"j-done":   {Output: "whole", OutputBytes: 5},
		"j-capped": {Output: "abc", OutputBytes: 900, OutputTruncated: true},
	} {
		got, ok, err := jobs.Get(id)
		if err != nil || !ok {
			t.Fatalf("Get %s: %v %v", id, ok, err)
		}
		if got.Output != want.Output || got.OutputBytes != want.OutputBytes || got.OutputTruncated != want.OutputTruncated {
			t.Errorf("%s keeps %q (%d bytes, truncated %v), want %q (%d, %v)", id, got.Output, got.OutputBytes,
				got.OutputTruncated, want.Output, want.OutputBytes, want.OutputTruncated)
		}
	}
	var pieces int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM job_output").Scan(&pieces); err != nil || pieces != 0 {
		t.Fatalf("%d pieces of output left once every job finished (%v)", pieces, err)
	}
}
