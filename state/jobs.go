package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// Jobs is the jobs table's typed interface. Its write methods return once
// the write is committed; the JobSubmitted, JobDispatched, ... constructors
// make the same writes for Store.Enqueue (an actor that must not block) and
// Store.Do (many at once).
//
// The recovery rule after a crash rests on one ordering the caller keeps: a
// job's dispatch is committed (JobDispatched) before its Job frame is
// written to a runner. Then a job still recorded as queued was never seen by
// any runner and can run again; one recorded as dispatched or running may
// have run (Unfinished.MayHaveRun).
type Jobs struct{ s *Store }

// Jobs returns the jobs table's interface.
func (s *Store) Jobs() Jobs { return Jobs{s} }

// Submit records a submitted job: rec (ID, Lane, CreatedAt; State queued)
// and the spec it was submitted with, so that a queued job can run again
// after a crash.
func (j Jobs) Submit(ctx context.Context, rec api.JobRecord, spec api.JobSpec) error {
	return j.s.Do(ctx, JobSubmitted(rec, spec))
}

// Dispatch records that the job was handed to a runner.
func (j Jobs) Dispatch(ctx context.Context, id, runnerID string, runnerPid int, at time.Time) error {
	return j.s.Do(ctx, JobDispatched(id, runnerID, runnerPid, at))
}

// Run records that the runner started the job.
func (j Jobs) Run(ctx context.Context, id string) error { return j.s.Do(ctx, JobRunning(id)) }

// Requeue records that a dispatched job went back to its queue without any
// runner having seen it.
func (j Jobs) Requeue(ctx context.Context, id string) error { return j.s.Do(ctx, JobRequeued(id)) }

// Finish records a job's terminal record. A job finishes once: a second
// Finish fails with ErrFinished and changes nothing.
func (j Jobs) Finish(ctx context.Context, rec api.JobRecord) error {
	return j.s.Do(ctx, JobFinished(rec))
}

// The time format of every time column: UTC, fixed width (so text order is
// time order), microseconds.
const timeLayout = "2006-01-02T15:04:05.000000Z"

func fmtTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(timeLayout)
}

func fmtTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return fmtTime(*t)
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// jsonStrings writes a JSON array of strings, readable in sqlite3 (no
// HTML escaping). Strings must be UTF-8: JSON cannot carry other bytes.
func jsonStrings(field string, ss []string) (any, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	b := make([]byte, 0, 64)
	b = append(b, '[')
	for i, s := range ss {
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("%s[%d] is not valid UTF-8", field, i)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendJSONString(b, s, false)
	}
	return string(append(b, ']')), nil
}

func jsonEnv(env map[string]string) (any, error) {
	if len(env) == 0 {
		return nil, nil
	}
	for k, v := range env {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("env %q is not valid UTF-8", k)
		}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil { // sorted keys
		return nil, err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

func uint63(field string, v uint64) (any, error) {
	if v == 0 {
		return nil, nil
	}
	if v > math.MaxInt64 {
		return nil, fmt.Errorf("%s %d is too large", field, v)
	}
	return int64(v), nil
}

// JobSubmitted is the write Jobs.Submit makes.
func JobSubmitted(rec api.JobRecord, spec api.JobSpec) Write {
	return &jobSubmitted{rec: rec, spec: spec}
}

type jobSubmitted struct {
	rec            api.JobRecord
	spec           api.JobSpec
	args, specArgs []any
}

func (w *jobSubmitted) what() string { return "record job " + w.rec.ID + " submitted" }

func (w *jobSubmitted) prepare() error {
	r, sp := &w.rec, &w.spec
	switch {
	case r.ID == "":
		return errors.New("the job has no id")
	case r.Lane == "":
		return errors.New("the job has no lane")
	case r.State != "" && r.State != api.StateQueued:
		return fmt.Errorf("a submitted job is queued, not %s", r.State)
	case !utf8.ValidString(r.ID):
		return errors.New("the job id is not valid UTF-8")
	}
	created := r.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	argv, err := jsonStrings("argv", sp.Argv)
	if err != nil {
		return err
	}
	env, err := jsonEnv(sp.Env)
	if err != nil {
		return err
	}
	files, err := jsonStrings("file_paths", sp.FilePaths)
	if err != nil {
		return err
	}
	secrets, err := jsonEnv(sp.Secrets) // names only
	if err != nil {
		return err
	}
	timeout, err := uint63("timeout_ms", sp.TimeoutMs)
	if err != nil {
		return err
	}
	maxOut, err := uint63("max_output_bytes", sp.MaxOutputBytes)
	if err != nil {
		return err
	}
	var grace any
	if sp.KillGraceMs != nil {
		if *sp.KillGraceMs > math.MaxInt64 {
			return fmt.Errorf("kill_grace_ms %d is too large", *sp.KillGraceMs)
		}
		grace = int64(*sp.KillGraceMs)
	}
	w.args = []any{r.ID, r.Lane, fmtTime(created), nullStr(sp.Command), argv, nullStr(sp.Cwd)}
	w.specArgs = []any{nullStr(sp.WorktreeDir), env, timeout, maxOut, files, nullStr(sp.AgentID),
		nullStr(sp.ToolName), nullBytes([]byte(sp.Stdin)), nullBytes(sp.StdinB64), grace, sp.StdinStream, secrets}
	return nil
}

func (w *jobSubmitted) apply(t *wtx) error {
	ok, err := t.exec1(`INSERT INTO jobs(id, lane, state, created_at, command, argv, cwd)
		VALUES(?, ?, 'queued', ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`, w.args...)
	if err == nil && !ok {
		return ErrExists
	}
	if err != nil {
		return err
	}
	_, err = t.exec(`INSERT INTO job_specs(seq, worktree_dir, env, timeout_ms, max_output_bytes, file_paths,
		agent_id, tool_name, stdin, stdin_b64, kill_grace_ms, stdin_stream, secrets) VALUES(last_insert_rowid(), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, w.specArgs...)
	return err
}

// JobDispatched is the write Jobs.Dispatch makes.
func JobDispatched(id, runnerID string, runnerPid int, at time.Time) Write {
	if at.IsZero() {
		at = time.Now()
	}
	return &jobUpdate{id: id, verb: "dispatched", query: `UPDATE jobs SET state = 'dispatched', runner_id = ?,
		runner_pid = ?, dispatched_at = ? WHERE id = ? AND finished_at IS NULL`,
		args: []any{nullStr(runnerID), int64(runnerPid), fmtTime(at), id}}
}

// JobRunning is the write Jobs.Run makes.
func JobRunning(id string) Write {
	return &jobUpdate{id: id, verb: "running",
		query: `UPDATE jobs SET state = 'running' WHERE id = ? AND finished_at IS NULL`, args: []any{id}}
}

// JobRequeued is the write Jobs.Requeue makes.
func JobRequeued(id string) Write {
	return &jobUpdate{id: id, verb: "requeued", query: `UPDATE jobs SET state = 'queued', runner_id = NULL,
		runner_pid = NULL, dispatched_at = NULL WHERE id = ? AND finished_at IS NULL`, args: []any{id}}
}

type jobUpdate struct {
	id, verb, query string
	args            []any
}

func (w *jobUpdate) what() string { return "record job " + w.id + " " + w.verb }
func (w *jobUpdate) prepare() error {
	if w.id == "" {
		return errors.New("the job has no id")
	}
	return nil
}
func (w *jobUpdate) apply(t *wtx) error {
	ok, err := t.exec1(w.query, w.args...)
	if err == nil && !ok {
		return whyUnchanged(t, w.id)
	}
	return err
}

// whyUnchanged says why an update of an unfinished job changed no row.
func whyUnchanged(t *wtx, id string) error {
	var finished bool
	err := t.queryRow("SELECT finished_at IS NOT NULL FROM jobs WHERE id = ?", id).Scan(&finished)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return err
	case finished:
		return ErrFinished
	}
	return errors.New("no row changed") // not reached: the row matched
}

// JobOutputStreamed records a piece of a running job's kept output as it
// streams: data is the bytes at off of what its record keeps, total what
// the job had written by then. The pieces are what a daemon killed
// mid-job leaves of its output; JobLost puts them in its record, and a
// job's end (JobFinished, whose record has the output whole) deletes them.
// A piece of a job already finished changes nothing. data is not copied:
// it must not change until the write is done.
func JobOutputStreamed(id string, off int64, data []byte, total int64) Write {
	return &jobOutput{id: id, off: off, data: data, total: total}
}

type jobOutput struct {
	id         string
	off, total int64
	data       []byte
}

func (w *jobOutput) what() string { return "record job " + w.id + " output" }

func (w *jobOutput) prepare() error {
	switch {
	case w.id == "":
		return errors.New("the job has no id")
	case w.off < 0 || w.total < w.off+int64(len(w.data)):
		return fmt.Errorf("output piece at %d of %d bytes past the %d the job wrote", w.off, len(w.data), w.total)
	}
	return nil
}

func (w *jobOutput) apply(t *wtx) error {
	data := w.data
	if data == nil {
		data = []byte{} // NOT NULL: a piece that only counts
	}
	_, err := t.exec(`INSERT INTO job_output(seq, off, total, data) SELECT seq, ?, ?, ? FROM jobs
		WHERE id = ? AND finished_at IS NULL ON CONFLICT(seq, off) DO UPDATE SET total = excluded.total,
		data = excluded.data`, w.off, w.total, data, w.id)
	return err
}

// JobFinished is the write Jobs.Finish makes.
func JobFinished(rec api.JobRecord) Write { return &jobFinished{rec: rec} }

// JobLost is the terminal record of a job whose end no runner reported (a
// daemon that died while it ran): its output is what it streamed into the
// store (JobOutputStreamed) up to then, whatever rec says of it.
func JobLost(rec api.JobRecord) Write { return &jobFinished{rec: rec, streamed: true} }

type jobFinished struct {
	rec      api.JobRecord
	streamed bool // the output is taken from job_output
	args     []any
}

func (w *jobFinished) what() string { return "record job " + w.rec.ID + " finished" }

func (w *jobFinished) prepare() error {
	r := &w.rec
	if r.ID == "" {
		return errors.New("the job has no id")
	}
	if !r.State.Terminal() {
		return fmt.Errorf("%q is not a terminal state", r.State)
	}
	finished := time.Now()
	if r.FinishedAt != nil {
		finished = *r.FinishedAt
	}
	var exit any
	if r.ExitCode != nil {
		exit = int64(*r.ExitCode)
	}
	var pid any
	if r.RunnerPid != 0 {
		pid = int64(r.RunnerPid)
	}
	var usage any
	if r.Usage != nil {
		b, err := json.Marshal(r.Usage)
		if err != nil {
			return fmt.Errorf("encoding its usage: %w", err)
		}
		usage = string(b)
	}
	w.args = []any{string(r.State), nullStr(r.RunnerID), pid, fmtTimePtr(r.DispatchedAt), fmtTime(finished), exit,
		nullStr(r.Signal), nullStr(r.Error), b2i(r.WasTimeout), b2i(r.WasCancelled), r.DurationMs, r.OutputBytes,
		b2i(r.OutputTruncated), nullBytes([]byte(r.Output)), nullStr(r.StoppedBy), b2i(r.OutputCut), usage, r.ID}
	return nil
}

// The places of output_bytes, output_truncated and output in
// jobFinished.args.
const argOutputBytes, argTruncated, argOutput = 11, 12, 13

// streamedOutput reads the pieces of the job's output streamed into the
// store, joined in order (up to a hole, which no write leaves), and the
// most the job was counted to have written.
func streamedOutput(t *wtx, id string) (out []byte, total int64, err error) {
	rows, err := t.query(`SELECT o.off, o.total, o.data FROM job_output o JOIN jobs j USING (seq)
		WHERE j.id = ? ORDER BY o.off`, id)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var off, tot int64
		var data []byte
		if err := rows.Scan(&off, &tot, &data); err != nil {
			return nil, 0, err
		}
		total = max(total, tot)
		if off == int64(len(out)) {
			out = append(out, data...)
		}
	}
	return out, max(total, int64(len(out))), rows.Err()
}

func (w *jobFinished) apply(t *wtx) error {
	if w.streamed {
		out, total, err := streamedOutput(t, w.rec.ID)
		if err != nil {
			return fmt.Errorf("reading the output it streamed: %w", err)
		}
		w.args[argOutputBytes], w.args[argTruncated], w.args[argOutput] = total, b2i(total > int64(len(out))), nullBytes(out)
	}
	ok, err := t.exec1(`UPDATE jobs SET state = ?, runner_id = ?, runner_pid = ?, dispatched_at = ?, finished_at = ?,
		exit_code = ?, signal = ?, error = ?, was_timeout = ?, was_cancelled = ?, duration_ms = ?,
		output_bytes = ?, output_truncated = ?, output = ?, stopped_by = ?, output_cut = ?, usage = ? WHERE id = ? AND finished_at IS NULL`, w.args...)
	if err == nil && !ok {
		return whyUnchanged(t, w.rec.ID)
	}
	return err
}

// The columns of a record, then those of its spec, then its output, in the
// order scanJob reads them.
const (
	recordCols = `id, lane, state, created_at, dispatched_at, finished_at, runner_id, runner_pid, exit_code,
		signal, error, was_timeout, was_cancelled, duration_ms, output_bytes, output_truncated, command, argv, cwd,
		stopped_by, output_cut, usage`
	specCols = `s.worktree_dir, s.env, s.timeout_ms, s.max_output_bytes, s.file_paths, s.agent_id, s.tool_name,
		s.stdin, s.stdin_b64, s.kill_grace_ms, s.stdin_stream, s.secrets`
)

type scanner interface{ Scan(dest ...any) error }

// scanJob reads recordCols, then specCols if spec is not nil, then the
// output if output.
func scanJob(sc scanner, spec *api.JobSpec, output bool) (api.JobRecord, error) {
	var (
		r                                      api.JobRecord
		state, created                         string
		dispatched, finished, runnerID, signal sql.NullString
		errStr, command, argv, cwd, stoppedBy  sql.NullString
		pid, exit                              sql.NullInt64
		timeout, cancelled, truncated          bool
		worktree, env, files, agent, tool      sql.NullString
		secrets                                sql.NullString
		timeoutMs, maxOut, grace               sql.NullInt64
		stdin, stdinB64                        []byte
		out                                    sql.RawBytes // the driver's own copy, taken as r.Output
		stdinStream, cut                       bool
		usage                                  sql.NullString
	)
	dest := []any{&r.ID, &r.Lane, &state, &created, &dispatched, &finished, &runnerID, &pid, &exit,
		&signal, &errStr, &timeout, &cancelled, &r.DurationMs, &r.OutputBytes, &truncated, &command, &argv, &cwd,
		&stoppedBy, &cut, &usage}
	if spec != nil {
		dest = append(dest, &worktree, &env, &timeoutMs, &maxOut, &files, &agent, &tool, &stdin, &stdinB64, &grace, &stdinStream, &secrets)
	}
	if output {
		dest = append(dest, &out)
	}
	if err := sc.Scan(dest...); err != nil {
		return r, err
	}
	var err error
	r.State = api.State(state)
	if r.CreatedAt, err = time.Parse(timeLayout, created); err != nil {
		return r, fmt.Errorf("job %s: created_at: %w", r.ID, err)
	}
	if r.DispatchedAt, err = parseTimePtr(dispatched); err != nil {
		return r, fmt.Errorf("job %s: dispatched_at: %w", r.ID, err)
	}
	if r.FinishedAt, err = parseTimePtr(finished); err != nil {
		return r, fmt.Errorf("job %s: finished_at: %w", r.ID, err)
	}
	r.RunnerID, r.RunnerPid = runnerID.String, int(pid.Int64)
	if exit.Valid {
		c := int32(exit.Int64)
		r.ExitCode = &c
	}
	r.Signal, r.Error, r.StoppedBy = signal.String, errStr.String, stoppedBy.String
	r.WasTimeout, r.WasCancelled, r.OutputTruncated, r.OutputCut = timeout, cancelled, truncated, cut
	r.Command, r.Cwd = command.String, cwd.String
	if usage.Valid {
		r.Usage = new(api.Usage)
		if err := json.Unmarshal([]byte(usage.String), r.Usage); err != nil {
			return r, fmt.Errorf("job %s: usage: %w", r.ID, err)
		}
	}
	if argv.Valid {
		if err := json.Unmarshal([]byte(argv.String), &r.Argv); err != nil {
			return r, fmt.Errorf("job %s: argv: %w", r.ID, err)
		}
	}
	// The driver (modernc.org/sqlite's columnBlob) copies a blob into a
	// fresh slice of its own for each row, and database/sql hands it over
	// as is for RawBytes: the record takes that slice as its string, not
	// a second copy (a 1 MiB output read from the store: 3.2 ms -> 1.9
	// ms, BenchmarkGetOutput1MiB; the copy and its garbage were 40 %).
	// TestGetOutputReadPath fails if a later read reuses it.
	r.Output = unsafe.String(unsafe.SliceData(out), len(out))
	if spec != nil {
		*spec = api.JobSpec{Lane: r.Lane, Command: r.Command, Argv: r.Argv, Cwd: r.Cwd, WorktreeDir: worktree.String,
			TimeoutMs: uint64(timeoutMs.Int64), MaxOutputBytes: uint64(maxOut.Int64), AgentID: agent.String,
			ToolName: tool.String, Stdin: string(stdin), StdinB64: stdinB64, StdinStream: stdinStream}
		if grace.Valid {
			g := uint64(grace.Int64)
			spec.KillGraceMs = &g
		}
		if env.Valid {
			if err := json.Unmarshal([]byte(env.String), &spec.Env); err != nil {
				return r, fmt.Errorf("job %s: env: %w", r.ID, err)
			}
		}
		if files.Valid {
			if err := json.Unmarshal([]byte(files.String), &spec.FilePaths); err != nil {
				return r, fmt.Errorf("job %s: file_paths: %w", r.ID, err)
			}
		}
		if secrets.Valid {
			if err := json.Unmarshal([]byte(secrets.String), &spec.Secrets); err != nil {
				return r, fmt.Errorf("job %s: secrets: %w", r.ID, err)
			}
		}
	}
	return r, nil
}

func parseTimePtr(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := time.Parse(timeLayout, s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Get returns a job's record with its output, byte for byte; ok is false
// for a job that is not recorded. The output is the driver's copy, taken
// as it is (scanJob).
func (j Jobs) Get(id string) (rec api.JobRecord, ok bool, err error) {
	st, err := j.s.read("SELECT " + recordCols + ", output FROM jobs WHERE id = ?")
	var rows *sql.Rows
	if err == nil {
		rows, err = st.QueryContext(bg, id)
	}
	if err == nil {
		defer rows.Close()
		if rows.Next() {
			rec, err = scanJob(rows, nil, true)
			ok = err == nil
		} else {
			err = rows.Err()
		}
	}
	if err != nil {
		return api.JobRecord{}, false, j.s.readErr("read job "+id, err)
	}
	return rec, ok, nil
}

// Query selects jobs for List; empty fields match everything.
type Query struct {
	State string    // a state name
	Lane  string    // a lane name
	Since time.Time // created at or after
	// Limit is the most jobs a page holds; 0 is no limit.
	Limit int
	// Cursor continues the listing after the last job of a page: the page's
	// Next. Use it with the same Newest.
	Cursor string
	// Newest lists newest first; else oldest first.
	Newest bool
	// NotPrefix leaves out jobs whose id starts with it (the fleet's, which
	// a fleet lists from its own records); "" leaves out none.
	NotPrefix string
}

// Page is one page of List.
type Page struct {
	Jobs []api.JobRecord // without their output (Get has it)
	// Next is the cursor of the next page; "" when this page is the last.
	Next string
	// After[i] is the cursor that continues the listing after Jobs[i].
	After []string
}

// List returns matching jobs in submission order (oldest first, or newest
// first), one page at a time. A page that ends at Limit has a Next cursor.
func (j Jobs) List(q Query) (Page, error) {
	var where []string
	var args []any
	if q.State != "" {
		if !api.ValidState(q.State) {
			return Page{}, fmt.Errorf("list jobs: unknown state %q", q.State)
		}
		where, args = append(where, "state = ?"), append(args, q.State)
	}
	if q.Lane != "" {
		where, args = append(where, "lane = ?"), append(args, q.Lane)
	}
	if !q.Since.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, fmtTime(q.Since))
	}
	if q.NotPrefix != "" {
		where, args = append(where, "substr(id, 1, ?) != ?"), append(args, len(q.NotPrefix), q.NotPrefix)
	}
	if q.Limit < 0 {
		return Page{}, fmt.Errorf("list jobs: negative limit %d", q.Limit)
	}
	if q.Cursor != "" {
		seq, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || seq < 1 {
			return Page{}, fmt.Errorf("list jobs: bad cursor %q (pass the next of a previous page)", q.Cursor)
		}
		if q.Newest {
			where = append(where, "seq < ?")
		} else {
			where = append(where, "seq > ?")
		}
		args = append(args, seq)
	}
	order, limit := "seq", 0
	if q.Newest {
		order = "seq DESC"
	}
	if q.Limit > 0 {
		limit = q.Limit + 1 // one more says whether there is a next page
	}
	query, args := listQuery("SELECT seq, "+recordCols+" FROM jobs", where, order, limit, args)
	st, err := j.s.read(query)
	if err != nil {
		return Page{}, j.s.readErr("list jobs", err)
	}
	rows, err := st.QueryContext(bg, args...)
	if err != nil {
		return Page{}, j.s.readErr("list jobs", err)
	}
	defer rows.Close()
	p := Page{Jobs: []api.JobRecord{}}
	var last int64
	for rows.Next() {
		if q.Limit > 0 && len(p.Jobs) == q.Limit {
			p.Next = strconv.FormatInt(last, 10)
			break
		}
		rec, err := scanJob(seqScanner{rows, &last}, nil, false)
		if err != nil {
			return Page{}, j.s.readErr("list jobs", err)
		}
		p.Jobs = append(p.Jobs, rec)
		p.After = append(p.After, strconv.FormatInt(last, 10))
	}
	if err := rows.Err(); err != nil {
		return Page{}, j.s.readErr("list jobs", err)
	}
	return p, nil
}

// seqScanner reads the seq column in front of the others.
type seqScanner struct {
	rows *sql.Rows
	seq  *int64
}

func (s seqScanner) Scan(dest ...any) error {
	return s.rows.Scan(append([]any{s.seq}, dest...)...)
}

// Unfinished is a job a daemon left unfinished: recorded, never finished.
type Unfinished struct {
	Record api.JobRecord
	Spec   api.JobSpec // as submitted, with the lane it was queued in
}

// MayHaveRun reports whether a runner may have seen the job: it was
// dispatched or running. A job that was only queued (never dispatched, or
// requeued since without a runner seeing it) did not run and can be queued
// again; one that may have run must not be run again.
func (u Unfinished) MayHaveRun() bool { return u.Record.State != api.StateQueued }

// Unfinished returns the jobs not finished, in submission order, with their
// specs: after a crash, the jobs the dead daemon left.
func (j Jobs) Unfinished() ([]Unfinished, error) {
	var n int // room for all of them, at once: they are big
	if cst, err := j.s.read("SELECT count(*) FROM job_specs"); err == nil && cst.QueryRowContext(bg).Scan(&n) == nil {
		n += 16 // some may come meanwhile
	}
	// Every unfinished job has its spec in job_specs, and no finished one.
	st, err := j.s.read("SELECT " + recordCols + ", " + specCols + " FROM job_specs s JOIN jobs USING (seq) ORDER BY seq")
	if err != nil {
		return nil, j.s.readErr("list unfinished jobs", err)
	}
	rows, err := st.QueryContext(bg)
	if err != nil {
		return nil, j.s.readErr("list unfinished jobs", err)
	}
	defer rows.Close()
	out := make([]Unfinished, 0, n)
	for rows.Next() {
		var u Unfinished
		if u.Record, err = scanJob(rows, &u.Spec, false); err != nil {
			return nil, j.s.readErr("list unfinished jobs", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, j.s.readErr("list unfinished jobs", err)
	}
	return out, nil
}

// Prune deletes finished jobs: all but the keep most recently finished
// (keep <= 0: no bound on the count), and those finished before before
// (zero: no bound on age). Unfinished jobs are never pruned. It deletes in
// small transactions between other writes and returns how many it deleted.
func (j Jobs) Prune(ctx context.Context, keep int, before time.Time) (int, error) {
	return j.s.prune(ctx, &jobsPrune, keep, before)
}

// jobsPrune prunes the jobs finished (finished_at set), by finished_at
// then seq.
var jobsPrune = pruneQueries{
	noun: "jobs",
	last: `SELECT finished_at, seq FROM jobs WHERE finished_at IS NOT NULL
			ORDER BY finished_at DESC, seq DESC LIMIT 1 OFFSET ?`,
	beforeLast: `DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE finished_at IS NOT NULL
			AND (finished_at < ? OR finished_at = ? AND seq < ?) LIMIT ?)`,
	before: `DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE finished_at IS NOT NULL
			AND finished_at < ? LIMIT ?)`,
}
