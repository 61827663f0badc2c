package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/orchestrd/orchestrd/api"
)

// Durability says what a commit survives.
type Durability string

const (
	// DurabilityProcess survives kill -9 of the daemon (WAL,
	// synchronous=NORMAL: no fsync per commit). The default.
	DurabilityProcess Durability = "process"
	// DurabilityPower also survives power loss (synchronous=FULL: the WAL
	// is fsynced on every commit).
	DurabilityPower Durability = "power"
)

// Options tune a Store; the zero value is the default.
type Options struct {
	Durability Durability // "" is DurabilityProcess
	// BusyTimeout is how long a statement waits for a lock another
	// connection holds (another process with the file open, a checkpoint)
	// before it fails. Default 5s.
	BusyTimeout time.Duration
	// QueueSize bounds the writes waiting for the writer. Default 4096.
	QueueSize int
	// Readers is the number of read connections. Default 4.
	Readers int
	// OnCommit, when set, hears of every transaction committed: how many
	// writes it held and how long it took, from BEGIN to the end of
	// COMMIT (the fsync too, with DurabilityPower). It is called on the
	// writer goroutine before the writes' callbacks, and must not block
	// (the daemon's metrics observe a histogram).
	OnCommit func(writes int, d time.Duration)
}

const (
	defaultBusyTimeout = 5 * time.Second
	defaultQueueSize   = 4096
	defaultReaders     = 4
	// maxBatch is the most writes one transaction takes: a bigger batch
	// delays the acknowledgement of its first write for little gain.
	maxBatch = 512
)

// Errors a write can end with; they are wrapped with what was being
// written, so test them with errors.Is.
var (
	ErrClosed    = errors.New("the state store is closed")
	ErrQueueFull = errors.New("the state store's write queue is full")
	ErrNotFound  = errors.New("not recorded")
	ErrExists    = errors.New("already recorded")
	ErrFinished  = errors.New("already finished")
)

// SchemaError is Open's error for a file written by a newer orchestrd.
type SchemaError struct {
	Path        string
	FileVersion int // the file's schema version
	Supported   int // the newest this build knows
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("state store %s has schema version %d, newer than this orchestrd supports (%d): run the newer orchestrd, or move the file away to start afresh",
		e.Path, e.FileVersion, e.Supported)
}

// Store owns state.db: one writer goroutine with group commit, and a pool
// of read connections. Its methods are safe for concurrent use.
type Store struct {
	path   string
	nodeID string

	wdb *sql.DB // one connection: the writer's
	wc  *sql.Conn
	w   wtx // used by the writer goroutine only, once it runs
	rdb *sql.DB

	rmu   sync.Mutex
	rstmt map[string]*sql.Stmt // prepared read statements, by query

	mu      sync.RWMutex // closed and q's closing; RLock held while sending
	closed  bool
	q       chan *op
	stopped chan struct{}

	linger *time.Timer // the writer's, see gather

	commits, writes, failed, maxBatch, inFlight atomic.Int64
	onCommit                                    func(writes int, d time.Duration)
}

// Stats counts what the writer did since Open.
type Stats struct {
	Commits  int64 // transactions committed
	Writes   int64 // writes committed
	Failed   int64 // writes that ended with an error
	MaxBatch int64 // the most writes one transaction committed
	Queued   int   // writes waiting for the writer now
	InFlight int64 // writes in the transaction the writer is committing now
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Writes: s.writes.Load(), Failed: s.failed.Load(),
		MaxBatch: s.maxBatch.Load(), Queued: len(s.q), InFlight: s.inFlight.Load()}
}

// Path is the database file's absolute path.
func (s *Store) Path() string { return s.path }

// NodeID is this home's stable id: made when the file was created, the
// same across restarts.
func (s *Store) NodeID() string { return s.nodeID }

// Open opens (creating if needed) the database at path, upgrades its schema
// and starts the writer. Every error names the file and says what failed: a
// file that is not a database or is damaged, one that cannot be read or
// written, a read-only file system, a full disk, a schema newer than this
// build (*SchemaError).
func Open(path string, opt Options) (*Store, error) {
	return open(path, opt, migrations)
}

func open(path string, opt Options, migs []migration) (_ *Store, err error) {
	if abs, aerr := filepath.Abs(path); aerr == nil {
		path = abs
	}
	fail := func(what string, err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named once, here
		}
		if !errors.Is(err, syscall.ENOSPC) && noSpace(filepath.Dir(path)) {
			// SQLite says only "disk I/O error" when it cannot grow its
			// -shm file.
			err = fmt.Errorf("%w (the file system is full)", err)
		}
		return fmt.Errorf("state store %s: %s: %w", path, what, err)
	}
	switch opt.Durability {
	case "":
		opt.Durability = DurabilityProcess
	case DurabilityProcess, DurabilityPower:
	default:
		return nil, fail("options", fmt.Errorf("durability %q is not %q or %q", opt.Durability, DurabilityProcess, DurabilityPower))
	}
	if opt.BusyTimeout <= 0 {
		opt.BusyTimeout = defaultBusyTimeout
	}
	if opt.QueueSize <= 0 {
		opt.QueueSize = defaultQueueSize
	}
	if opt.Readers <= 0 {
		opt.Readers = defaultReaders
	}

	// SQLite would say only "unable to open database file"; opening it
	// ourselves first names the cause (permission denied, read-only file
	// system, is a directory...). A new file is made 0600: it holds jobs'
	// environments. SQLite gives its -wal and -shm files the same mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fail("open", err)
	}
	if st, serr := f.Stat(); serr == nil && !st.Mode().IsRegular() {
		f.Close()
		return nil, fail("open", fmt.Errorf("not a regular file (%s)", st.Mode().Type()))
	}
	f.Close()

	s := &Store{path: path, rstmt: map[string]*sql.Stmt{}, q: make(chan *op, opt.QueueSize), onCommit: opt.OnCommit,
		stopped: make(chan struct{})}
	defer func() {
		if err != nil {
			s.closeDBs()
		}
	}()
	ctx := context.Background()
	syncMode := "NORMAL"
	if opt.Durability == DurabilityPower {
		syncMode = "FULL"
	}
	// After a burst (big outputs) the WAL file is cut back to 64 MiB at
	// the next checkpoint instead of keeping its largest size. What a
	// delete frees in a page it rewrites anyway is zeroed (secure_delete
	// FAST): a finished job's spec (its env) does not stay in the file's
	// free space, at no cost measured (BenchmarkJobWrites; pruning jobs of
	// 1 MiB outputs within noise, where ON, which also zeroes freed
	// overflow pages, took twice as long). Freed overflow pages (a spec
	// larger than about 4 KiB, with stdin) and the WAL's older frames keep
	// their bytes until they are reused.
	if s.wdb, err = sql.Open("sqlite", dsn(path, opt.BusyTimeout, "synchronous("+syncMode+")",
		"journal_size_limit(67108864)", "secure_delete(FAST)")); err != nil {
		return nil, fail("open", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	if s.wc, err = s.wdb.Conn(ctx); err != nil {
		return nil, fail("open", err)
	}
	var mode string
	if err = s.wc.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return nil, fail("open", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return nil, fail("open", fmt.Errorf("cannot use WAL mode (journal mode is %q)", mode))
	}
	if err = migrate(ctx, s.wc, path, migs); err != nil {
		var se *SchemaError
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, fail("upgrade schema", err)
	}
	s.w = wtx{c: s.wc, stmts: map[string]*sql.Stmt{}}
	// Writing at every open proves the file can be written now (a
	// read-only file system, a full disk), not at the first job.
	if s.nodeID, err = s.writeOpened(); err != nil {
		return nil, fail("record the open", err)
	}

	if s.rdb, err = sql.Open("sqlite", dsn(path, opt.BusyTimeout, "query_only(1)")); err != nil {
		return nil, fail("open for reading", err)
	}
	s.rdb.SetMaxOpenConns(opt.Readers)
	s.rdb.SetMaxIdleConns(opt.Readers)
	var n int
	if err = s.rdb.QueryRowContext(ctx, "SELECT count(*) FROM job_specs").Scan(&n); err != nil {
		return nil, fail("open for reading", err)
	}

	go s.run()
	return s, nil
}

// noSpace reports whether the file system of dir has no free block left.
func noSpace(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Bavail == 0
}

// dsn is the driver's name for the file: a URI (so any path works) with the
// pragmas every connection runs when it opens.
func dsn(path string, busy time.Duration, pragmas ...string) string {
	v := url.Values{}
	v.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	for _, p := range pragmas {
		v.Add("_pragma", p)
	}
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + esc + "?" + v.Encode()
}

// migrate brings the file to the newest version in migs, one migration per
// transaction, reading the version under the write lock.
func migrate(ctx context.Context, c *sql.Conn, path string, migs []migration) error {
	latest := migs[len(migs)-1].version
	for {
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		var v int
		if err := c.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			rollback(ctx, c)
			return fmt.Errorf("read schema version: %w", err)
		}
		if v > latest {
			rollback(ctx, c)
			return &SchemaError{Path: path, FileVersion: v, Supported: latest}
		}
		if v == latest {
			rollback(ctx, c)
			return nil
		}
		var m *migration
		for i := range migs {
			if migs[i].version == v+1 {
				m = &migs[i]
			}
		}
		if m == nil {
			rollback(ctx, c)
			return fmt.Errorf("no migration from schema version %d", v)
		}
		if _, err := c.ExecContext(ctx, m.sql); err != nil {
			rollback(ctx, c)
			return fmt.Errorf("schema version %d to %d (%s): %w", v, m.version, m.name, err)
		}
		if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
			rollback(ctx, c)
			return fmt.Errorf("schema version %d to %d (%s): set version: %w", v, m.version, m.name, err)
		}
		if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
			rollback(ctx, c)
			return fmt.Errorf("schema version %d to %d (%s): commit: %w", v, m.version, m.name, err)
		}
	}
}

func rollback(ctx context.Context, c *sql.Conn) {
	_, _ = c.ExecContext(ctx, "ROLLBACK") // an error means no transaction was left open
}

// writeOpened records the open and makes the node id at the first one.
func (s *Store) writeOpened() (string, error) {
	w := &metaOpened{newID: api.RandomHex(16), at: time.Now()}
	o := &op{w: w}
	s.commit([]*op{o})
	return w.nodeID, o.err
}

// closeDBs closes whatever Open got to open.
func (s *Store) closeDBs() error {
	var errs []error
	for _, st := range s.w.stmts {
		errs = append(errs, st.Close())
	}
	s.rmu.Lock()
	for _, st := range s.rstmt {
		errs = append(errs, st.Close())
	}
	s.rmu.Unlock()
	if s.wc != nil {
		errs = append(errs, s.wc.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	return errors.Join(errs...)
}

// Close commits the writes already queued, stops the writer and closes the
// file. Writes after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.q)
	s.mu.Unlock()
	<-s.stopped
	if err := s.closeDBs(); err != nil {
		return fmt.Errorf("state store %s: close: %w", s.path, err)
	}
	return nil
}

// A Write is one change to the store, made by a domain's constructor
// (JobSubmitted, JobFinished, ...) and applied by the writer.
type Write interface {
	// prepare checks and encodes the write on the caller's goroutine, so
	// bad input is refused before it is queued and the writer only
	// executes.
	prepare() error
	// apply executes it inside the writer's transaction. An error wrapping
	// ErrNotFound, ErrExists or ErrFinished means it changed nothing;
	// any other error rolls the transaction back (and the rest of the
	// batch is applied again without this write).
	apply(t *wtx) error
	// what says what it records, for errors: "record job j-1 running".
	what() string
}

type op struct {
	w    Write
	done func(error)
	err  error
}

func (s *Store) wrap(w Write, err error) error {
	return fmt.Errorf("state store %s: %s: %w", s.path, w.what(), err)
}

// Do queues the writes and returns once each is committed or has failed: nil
// when all were committed, else an error saying what failed (the first
// failure, and how many there were). The writes are applied in order and
// may share transactions with other callers' writes. ctx bounds only the
// wait for room in the queue: a queued write is always waited for, so an
// error never hides a write that was committed.
func (s *Store) Do(ctx context.Context, ws ...Write) error {
	if len(ws) == 0 {
		return nil
	}
	ch := make(chan error, len(ws))
	done := func(err error) { ch <- err }
	var first error
	failed, queued := 0, 0
	note := func(err error) {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	s.mu.RLock()
	for _, w := range ws {
		if s.closed {
			note(s.wrap(w, ErrClosed))
			continue
		}
		if err := w.prepare(); err != nil {
			note(s.wrap(w, err))
			continue
		}
		select {
		case s.q <- &op{w: w, done: done}:
			queued++
		case <-ctx.Done():
			note(s.wrap(w, fmt.Errorf("waiting for room in the write queue: %w", ctx.Err())))
		}
	}
	s.mu.RUnlock()
	for range queued {
		note(<-ch)
	}
	if failed > 1 {
		return fmt.Errorf("%d of %d writes failed, the first: %w", failed, len(ws), first)
	}
	return first
}

// Enqueue queues w without waiting and returns at once: an error (the
// write is not queued, done is not called) if w is bad input, the queue is
// full or the store is closed. Otherwise done, if not nil, is called with
// nil once w is committed or with the error that ended it. done runs on the
// writer goroutine: it must return quickly and must not call the Store.
// Writes enqueued by one goroutine are applied in the order it enqueued
// them. An actor that must not block records its job's changes this way.
func (s *Store) Enqueue(w Write, done func(error)) error {
	if err := w.prepare(); err != nil {
		return s.wrap(w, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return s.wrap(w, ErrClosed)
	}
	select {
	case s.q <- &op{w: w, done: done}:
		return nil
	default:
		return s.wrap(w, ErrQueueFull)
	}
}

// run is the writer: it takes everything queued and commits it in one
// transaction, until Close.
func (s *Store) run() {
	defer close(s.stopped)
	batch := make([]*op, 0, maxBatch)
	last := 0 // writes in the last commit
	for o := range s.q {
		batch = s.gather(append(batch[:0], o), last)
		last = len(batch)
		s.inFlight.Store(int64(len(batch)))
		s.commit(batch)
		s.inFlight.Store(0)
		for _, o := range batch {
			if o.done != nil {
				if o.err != nil {
					o.done(s.wrap(o.w, o.err))
				} else {
					o.done(nil)
				}
			}
		}
		clear(batch)
	}
}

// Lingering: a commit costs far more than a write in it (a transaction's
// locks, the WAL frames of the pages its writes share), so concurrent
// writers are cheapest together. The writer is woken by the first write
// of a burst, usually handed the processor by its writer at once; were it
// to commit at once, each commit would hold one or two writes while the
// other writers are on their way. So it first yields to the goroutines
// runnable with it (cheap: the processor is not given up), and when the
// last commit held lingerFrom writes or more (writers that will likely
// write again), it waits up to lingerMax for as many, giving up after a
// lingerStep with no new write. A lone writer, or a job's few writes,
// never wait.
const (
	lingerYields = 4
	lingerFrom   = 4
	lingerStep   = 50 * time.Microsecond
	lingerMax    = 250 * time.Microsecond
)

// gather adds to batch what is queued, waiting a little for the writes
// likely on their way (see Lingering); last is the size of the last
// commit.
func (s *Store) gather(batch []*op, last int) []*op {
	batch, open := s.drain(batch)
	for range lingerYields {
		n := len(batch)
		runtime.Gosched()
		if batch, open = s.drain(batch); len(batch) == n || !open {
			break
		}
	}
	want := min(last, maxBatch)
	if last < lingerFrom || len(batch) >= want || !open {
		return batch
	}
	if s.linger == nil {
		s.linger = time.NewTimer(lingerStep)
	} else {
		s.linger.Reset(lingerStep)
	}
	defer s.linger.Stop()
	for end := time.Now().Add(lingerMax); len(batch) < want && open; {
		select {
		case o, ok := <-s.q:
			if !ok {
				return batch
			}
			batch, open = s.drain(append(batch, o))
			if now := time.Now(); now.Before(end) {
				s.linger.Reset(min(lingerStep, end.Sub(now)))
				continue
			}
		case <-s.linger.C:
		}
		break
	}
	return batch
}

// drain adds to batch what is queued now (up to maxBatch); open is false
// once the queue is closed.
func (s *Store) drain(batch []*op) (_ []*op, open bool) {
	for len(batch) < maxBatch {
		select {
		case o, ok := <-s.q:
			if !ok {
				return batch, false
			}
			batch = append(batch, o)
		default:
			return batch, true
		}
	}
	return batch, true
}

// commit applies the batch in one transaction and sets each op's err.
func (s *Store) commit(batch []*op) {
	todo := batch
	start := time.Now()
	for len(todo) > 0 {
		if err := s.w.exec0("BEGIN IMMEDIATE"); err != nil {
			for _, o := range todo {
				o.err = fmt.Errorf("begin transaction: %w", err)
			}
			break
		}
		retry := false
		for i, o := range todo {
			if o.err = o.w.apply(&s.w); o.err != nil && !unchanged(o.err) {
				// The statement's error may have ended the transaction:
				// start again without this write.
				s.w.rollback()
				todo = append(append(make([]*op, 0, len(todo)-1), todo[:i]...), todo[i+1:]...)
				retry = true
				break
			}
		}
		if retry {
			continue
		}
		if err := s.w.exec0("COMMIT"); err != nil {
			s.w.rollback()
			for _, o := range todo {
				if o.err == nil {
					o.err = fmt.Errorf("commit transaction: %w", err)
				}
			}
			break
		}
		s.commits.Add(1)
		if s.onCommit != nil {
			s.onCommit(len(todo), time.Since(start))
		}
		break
	}
	var ok int64
	for _, o := range batch {
		if o.err == nil {
			ok++
		}
	}
	s.writes.Add(ok)
	s.failed.Add(int64(len(batch)) - ok)
	if ok > s.maxBatch.Load() {
		s.maxBatch.Store(ok)
	}
}

// unchanged reports whether err is a write's own verdict that left the
// transaction as it was.
func unchanged(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) || errors.Is(err, ErrFinished)
}

// wtx is the writer's connection with its prepared statements.
type wtx struct {
	c     *sql.Conn
	stmts map[string]*sql.Stmt
}

var bg = context.Background() // the writer's statements are never cancelled

func (t *wtx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := t.stmts[query]; ok {
		return st, nil
	}
	st, err := t.c.PrepareContext(bg, query)
	if err != nil {
		return nil, err
	}
	t.stmts[query] = st
	return st, nil
}

func (t *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(bg, args...)
}

// exec1 runs a statement that changes at most one row and reports whether
// it did.
func (t *wtx) exec1(query string, args ...any) (bool, error) {
	res, err := t.exec(query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (t *wtx) exec0(query string) error {
	_, err := t.exec(query)
	return err
}

func (t *wtx) queryRow(query string, args ...any) *sql.Row {
	st, err := t.stmt(query)
	if err != nil {
		return t.c.QueryRowContext(bg, query, args...) // reports the same error
	}
	return st.QueryRowContext(bg, args...)
}

func (t *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(bg, args...)
}

func (t *wtx) rollback() { rollback(bg, t.c) }

// read returns the prepared read statement for query.
func (s *Store) read(query string) (*sql.Stmt, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if st, ok := s.rstmt[query]; ok {
		return st, nil
	}
	st, err := s.rdb.PrepareContext(bg, query)
	if err != nil {
		return nil, err
	}
	s.rstmt[query] = st
	return st, nil
}

func (s *Store) readErr(what string, err error) error {
	return fmt.Errorf("state store %s: %s: %w", s.path, what, err)
}
