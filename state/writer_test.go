package state

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// sqlWrite runs one statement in the writer's transaction (and reads one
// value back with it, if out is set): writes a test needs that no domain
// makes, such as one the database refuses.
type sqlWrite struct {
	query string
	out   *string
}

func (w *sqlWrite) what() string   { return "test: " + w.query }
func (w *sqlWrite) prepare() error { return nil }
func (w *sqlWrite) apply(t *wtx) error {
	if w.out != nil {
		return t.queryRow(w.query).Scan(w.out)
	}
	_, err := t.exec(w.query)
	return err
}

// Writes queued while the writer is busy share one commit. The writer is
// held the way another process would hold it: by the database's write
// lock, taken from another connection.
func TestGroupCommitOneCommitForQueuedWrites(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	release := holdWriteLock(t, path)
	defer release()

	// The writer takes the first write and waits for the lock with it...
	first := make(chan error, 1)
	if err := s.Enqueue(JobSubmitted(submitted("plug", "net", api.JobSpec{}, time.Now()), api.JobSpec{}), func(err error) { first <- err }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the writer to take the first write", func() bool { return s.Stats().InFlight == 1 })
	before := s.Stats()

	// ...while N writers queue theirs.
	const n = 200
	var queued, committed sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		queued.Add(1)
		committed.Add(1)
		go func() {
			defer queued.Done()
			id := fmt.Sprintf("j-%d", i)
			w := JobSubmitted(submitted(id, "net", api.JobSpec{Command: "true"}, time.Now()), api.JobSpec{Command: "true"})
			if err := s.Enqueue(w, func(err error) { errs <- err; committed.Done() }); err != nil {
				errs <- err
				committed.Done()
			}
		}()
	}
	queued.Wait()
	if st := s.Stats(); st.Commits != before.Commits {
		t.Fatalf("committed while the write lock was held: %+v", st)
	}
	release()
	committed.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	if got := after.Commits - before.Commits; got != 2 {
		t.Fatalf("%d writes took %d commits, want 2 (the first write's, then one for all queued behind it)", n+1, got)
	}
	if after.MaxBatch != n {
		t.Fatalf("largest batch %d, want %d", after.MaxBatch, n)
	}
	if p, err := s.Jobs().List(Query{}); err != nil || len(p.Jobs) != n+1 {
		t.Fatalf("%d jobs recorded (%v), want %d", len(p.Jobs), err, n+1)
	}
}

// Free-running concurrent writers share commits too: each waits for its
// commit, so while one commit is written the others queue behind it.
func TestGroupCommitConcurrentWriters(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	const writers, each = 32, 40
	before := s.Stats()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("j-%d-%d", g, i)
				if err := s.Jobs().Submit(ctx, submitted(id, "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatal(failed[0])
	}
	st := s.Stats()
	writes, commits := st.Writes-before.Writes, st.Commits-before.Commits
	t.Logf("%d writes in %d commits (%.1f writes a commit, the largest %d)", writes, commits, float64(writes)/float64(commits), st.MaxBatch)
	if writes != writers*each || commits*2 > writes {
		t.Fatalf("%d writes took %d commits: no group commit", writes, commits)
	}
}

// Reads have their own connections: a reader gets the committed state while
// the writer is stuck in a transaction with writes queued behind it.
func TestReadsDoNotWaitForTheWriter(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	if err := s.Jobs().Submit(ctx, submitted("j-1", "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
		t.Fatal(err)
	}
	release := holdWriteLock(t, path)
	defer release()
	done := make(chan error, 2)
	for i := range 2 {
		if err := s.Enqueue(JobRunning("j-1"), func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the writer to take the first write and the second to queue", func() bool {
			st := s.Stats()
			return st.InFlight == 1 && st.Queued == i
		})
	}

	read := make(chan string, 1)
	go func() {
		rec, ok, err := s.Jobs().Get("j-1")
		p, lerr := s.Jobs().List(Query{Lane: "net"})
		u, uerr := s.Jobs().Unfinished()
		read <- fmt.Sprintf("%s %v %v %d %v %d %v", rec.State, ok, err, len(p.Jobs), lerr, len(u), uerr)
	}()
	select {
	case got := <-read:
		if got != "queued true <nil> 1 <nil> 1 <nil>" {
			t.Fatalf("read while the writer waits: %s", got)
		}
	case <-time.After(20 * time.Second):
		release()
		t.Fatal("a read waited for the writer")
	}
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// A write the database refuses fails alone: the rest of its batch is
// committed without it.
func TestFailedWriteLeavesItsBatch(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	release := holdWriteLock(t, path)
	defer release()
	results := make([]chan error, 5)
	writes := []Write{
		JobSubmitted(submitted("j-1", "net", api.JobSpec{}, time.Now()), api.JobSpec{}),
		JobRunning("j-404"), // refused by the store: changes nothing
		&sqlWrite{query: "INSERT INTO no_such_table VALUES (1)"}, // refused by SQLite
		JobSubmitted(submitted("j-2", "net", api.JobSpec{}, time.Now()), api.JobSpec{}),
		JobRunning("j-1"),
	}
	for i, w := range writes {
		results[i] = make(chan error, 1)
		if err := s.Enqueue(w, func(err error) { results[i] <- err }); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the writes to be taken or queued", func() bool { return s.Stats().Queued <= 4 })
	release()
	for i, want := range []string{"", "record job j-404 running: not recorded", "no such table: no_such_table", "", ""} {
		err := <-results[i]
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("write %d: %v, want %q", i, err, want)
		}
	}
	for id, state := range map[string]api.State{"j-1": api.StateRunning, "j-2": api.StateQueued} {
		if rec, ok, err := s.Jobs().Get(id); !ok || err != nil || rec.State != state {
			t.Errorf("%s: %v %v %v, want %s", id, rec.State, ok, err, state)
		}
	}
}

// Enqueue never blocks: a full queue is an error at once.
func TestEnqueueFullQueue(t *testing.T) {
	path := dbPath(t)
	opt := testOpts
	opt.QueueSize = 4
	s := openT(t, path, opt)
	release := holdWriteLock(t, path)
	defer release()
	var wg sync.WaitGroup
	wg.Add(5)
	for i := range 5 { // one for the writer to hold, four to fill the queue
		if err := s.Enqueue(&metaSet{key: "k", value: "v"}, func(error) { wg.Done() }); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			waitFor(t, "the writer to take the first write", func() bool { return s.Stats().InFlight == 1 })
		}
	}
	if q := s.Stats().Queued; q != 4 {
		t.Fatalf("%d queued, want 4", q)
	}
	err := s.Enqueue(JobRunning("j"), func(error) { t.Error("done called for a write not queued") })
	if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "record job j running") {
		t.Fatalf("Enqueue on a full queue: %v", err)
	}
	release()
	wg.Wait()
}

func TestDurabilitySetting(t *testing.T) {
	for _, c := range []struct {
		d    Durability
		want string
	}{{"", "1"}, {DurabilityProcess, "1"}, {DurabilityPower, "2"}} {
		s := openT(t, dbPath(t), Options{Durability: c.d})
		var sync, mode string
		if err := s.Do(ctx, &sqlWrite{query: "PRAGMA synchronous", out: &sync}, &sqlWrite{query: "PRAGMA journal_mode", out: &mode}); err != nil {
			t.Fatal(err)
		}
		if sync != c.want || mode != "wal" {
			t.Errorf("durability %q: synchronous %s, journal_mode %s; want %s (1 NORMAL, 2 FULL) and wal", c.d, sync, mode, c.want)
		}
	}
	_, err := Open(dbPath(t), Options{Durability: "disk"})
	if err == nil || !strings.Contains(err.Error(), `durability "disk" is not "process" or "power"`) {
		t.Fatalf("bad durability: %v", err)
	}
}

// OnCommit hears every committed transaction, with its writes and how
// long it took; the sums match the writer's counters.
func TestOnCommitHearsEachCommit(t *testing.T) {
	var mu sync.Mutex
	var calls, writes int
	var slowest time.Duration
	opts := testOpts
	opts.OnCommit = func(n int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		writes += n
		slowest = max(slowest, d)
	}
	s := openT(t, dbPath(t), opts)
	before := s.Stats()
	mu.Lock()
	calls0, writes0 := calls, writes // what opening the store committed
	mu.Unlock()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				id := fmt.Sprintf("j-%d-%d", g, i)
				if err := s.Jobs().Submit(ctx, submitted(id, "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	mu.Lock()
	defer mu.Unlock()
	if got, want := int64(calls-calls0), st.Commits-before.Commits; got != want || got == 0 {
		t.Fatalf("OnCommit called %d times for %d commits", got, want)
	}
	if got, want := int64(writes-writes0), st.Writes-before.Writes; got != want || got != 200 {
		t.Fatalf("OnCommit heard %d writes, the writer counted %d; want 200", got, want)
	}
	if slowest <= 0 {
		t.Fatalf("slowest commit %v", slowest)
	}
}

// Close while concurrent writers keep the writer lingering for them: every
// write queued is answered once, and each answered nil is in the file.
func TestCloseWhileWritersLinger(t *testing.T) {
	path := dbPath(t)
	s, err := Open(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 16
	var mu sync.Mutex
	answers := map[string]int{}
	var committed []string
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k-%d-%d", g, i)
				done := make(chan struct{})
				err := s.Enqueue(ContextPut(LoopsyRow{Key: key, Doc: []byte(`{}`)}), func(err error) {
					mu.Lock()
					answers[key]++
					if err == nil {
						committed = append(committed, key)
					}
					mu.Unlock()
					close(done)
				})
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("enqueue %s: %v", key, err)
					}
					return
				}
				<-done
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().MaxBatch < lingerFrom && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if s.Stats().MaxBatch < lingerFrom {
		t.Fatalf("no commit of %d writes from %d writers in 30 s", lingerFrom, writers)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for k, n := range answers {
		if n != 1 {
			t.Fatalf("%s answered %d times", k, n)
		}
	}
	s = openT(t, path, testOpts)
	rows, err := s.Loopsy().Context(0)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		have[r.Key] = true
	}
	for _, k := range committed {
		if !have[k] {
			t.Fatalf("%s was acknowledged and is not in the file", k)
		}
	}
	t.Logf("%d writes committed", len(committed))
}
