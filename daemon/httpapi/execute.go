package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Limits of the executions.
const (
	// streamBuffer bounds the output waiting for a streaming client; past
	// it the client is told how much it missed (an event of type
	// "dropped") rather than the daemon holding more or slowing the job.
	streamBuffer = 8 << 20
	// earlyBuffer bounds the output of jobs whose id is not yet known,
	// kept while a submission is under way (a job may write before its
	// submission is answered).
	earlyBuffer        = 4 << 20
	streamWriteTimeout = 30 * time.Second
)

// executeParams is Loopsy's ExecuteParams.
type executeParams struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Cwd     string            `json:"cwd"`
	Env     map[string]string `json:"env"`
	Timeout *float64          `json:"timeout"` // milliseconds
}

// check says what is wrong with the params, naming the field.
func (p executeParams) check() error {
	switch {
	case p.Command == "":
		return errors.New("command is required")
	case strings.ContainsRune(p.Command, 0):
		return errors.New("command must not hold a NUL byte")
	case p.Cwd != "" && !filepath.IsAbs(p.Cwd):
		return fmt.Errorf("cwd must be an absolute path, got %q", p.Cwd)
	case p.Timeout != nil && !(*p.Timeout > 0 && *p.Timeout <= float64(math.MaxInt64/int64(time.Millisecond))):
		return errors.New("timeout must be a positive number of milliseconds")
	}
	for _, a := range p.Args {
		if strings.ContainsRune(a, 0) {
			return errors.New("args must not hold a NUL byte")
		}
	}
	return nil
}

// parseExecute decodes an execute body (what decodeBody does, without
// the HTTP around it: the fuzz target).
func parseExecute(b []byte) (executeParams, error) {
	var p executeParams
	if err := json.Unmarshal(b, &p); err != nil {
		return p, err
	}
	return p, p.check()
}

// jobInfo is one entry of GET /execute/jobs (Loopsy's JobInfo).
type jobInfo struct {
	JobID      string   `json:"jobId"`
	Command    string   `json:"command"`
	Args       []string `json:"args"`
	StartedAt  int64    `json:"startedAt"`
	FromNodeID string   `json:"fromNodeId"`
	Stream     bool     `json:"stream"`
}

// execution is one command a peer asked for: its job's output as it comes.
type execution struct {
	info   jobInfo
	stream bool
	limit  int

	mu       sync.Mutex
	chunks   []lanes.JobOutput // stream: waiting for the client
	buffered int
	dropped  int64
	stdout   []byte
	stderr   []byte
	outCut   int64 // bytes of stdout past limit
	errCut   int64
	wake     chan struct{}
}

func (e *execution) push(o lanes.JobOutput) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stream {
		if e.buffered+len(o.Data) > streamBuffer {
			e.dropped += int64(len(o.Data))
		} else {
			e.chunks = append(e.chunks, o)
			e.buffered += len(o.Data)
		}
		select {
		case e.wake <- struct{}{}:
		default:
		}
		return
	}
	buf, cut := &e.stdout, &e.outCut
	if o.Stream == "stderr" {
		buf, cut = &e.stderr, &e.errCut
	}
	room := e.limit - len(*buf)
	if room >= len(o.Data) {
		*buf = append(*buf, o.Data...)
		return
	}
	if room > 0 {
		*buf = append(*buf, o.Data[:room]...)
	}
	*cut += int64(len(o.Data) - max(room, 0))
}

// take returns the chunks waiting and how many bytes were dropped since.
func (e *execution) take() ([]lanes.JobOutput, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cs, d := e.chunks, e.dropped
	e.chunks, e.buffered, e.dropped = nil, 0, 0
	return cs, d
}

// executions routes job output to the executions waiting for it, and
// bounds how many run at once.
type executions struct {
	s *Server

	mu      sync.Mutex
	byID    map[string]*execution
	slots   int // taken: running or being submitted
	pending int // submissions not yet answered
	early   map[string][]lanes.JobOutput
	earlyN  int
	totalN  int
	unsub   func()
	closed  bool
}

func newExecutions(s *Server) *executions {
	x := &executions{s: s, byID: map[string]*execution{}, early: map[string][]lanes.JobOutput{}}
	if s.opts.Bus != nil {
		x.unsub = s.opts.Bus.Subscribe([]string{"job.output"}, x)
	}
	return x
}

// Deliver routes one job.output (from Bus.Emit: it never blocks).
func (x *executions) Deliver(r *eventlog.Record) {
	o, ok := r.Event.(lanes.JobOutput)
	if !ok {
		return
	}
	x.mu.Lock()
	e := x.byID[o.JobID]
	if e == nil && x.pending > 0 && x.earlyN+len(o.Data) <= earlyBuffer {
		x.early[o.JobID] = append(x.early[o.JobID], o)
		x.earlyN += len(o.Data)
	}
	x.mu.Unlock()
	if e != nil {
		e.push(o)
	}
}

// reserve takes a slot and marks a submission under way; false past
// max_concurrent.
func (x *executions) reserve() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed || x.slots >= x.s.cfg.MaxConcurrent {
		return false
	}
	x.slots++
	x.pending++
	return true
}

// submitted ends a submission: with an id, e starts receiving the job's
// output (what came before it too); without, the slot is given back.
func (x *executions) submitted(id string, e *execution) {
	x.mu.Lock()
	x.pending--
	var early []lanes.JobOutput
	if id != "" {
		x.byID[id] = e
		x.totalN++
		early = x.early[id]
		delete(x.early, id)
	} else {
		x.slots--
	}
	if x.pending == 0 {
		x.early, x.earlyN = map[string][]lanes.JobOutput{}, 0
	}
	x.mu.Unlock()
	for _, o := range early {
		e.push(o)
	}
}

// finished gives a job's slot back.
func (x *executions) finished(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.byID[id]; ok {
		delete(x.byID, id)
		x.slots--
	}
}

func (x *executions) get(id string) *execution {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.byID[id]
}

func (x *executions) active() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byID)
}

func (x *executions) total() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.totalN
}

func (x *executions) list() []jobInfo {
	x.mu.Lock()
	out := make([]jobInfo, 0, len(x.byID))
	for _, e := range x.byID {
		out = append(out, e.info)
	}
	x.mu.Unlock()
	slices.SortFunc(out, func(a, b jobInfo) int { return int(a.StartedAt - b.StartedAt) })
	return out
}

// closeAll cancels every execution still running (the daemon stops).
func (x *executions) closeAll() {
	x.mu.Lock()
	x.closed = true
	ids := make([]string, 0, len(x.byID))
	for id := range x.byID {
		ids = append(ids, id)
	}
	x.mu.Unlock()
	for _, id := range ids {
		x.s.opts.Lanes.Cancel(id, func(bool, error) {})
	}
	if x.unsub != nil {
		x.unsub()
	}
}

// start checks a request and runs its command as a job on the exec lane:
// the execution, or false once it answered the error.
func (s *Server) start(w http.ResponseWriter, r *http.Request, stream bool) (*execution, string, bool) {
	var p executeParams
	if !decodeBody(w, r, &p) {
		return nil, "", false
	}
	if err := p.check(); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return nil, "", false
	}
	name := keyName(r)
	base := path.Base(p.Command)
	if slices.Contains(s.cfg.Denylist, base) {
		s.emit(ExecDenied{KeyName: name, Peer: r.RemoteAddr, Command: p.Command, Reason: "denylist"})
		writeError(w, http.StatusForbidden, CodeCommandDenied, fmt.Sprintf("Command '%s' is denied", base))
		return nil, "", false
	}
	if !s.exec.reserve() {
		s.emit(ExecDenied{KeyName: name, Peer: r.RemoteAddr, Command: p.Command, Reason: "max_concurrent"})
		writeError(w, http.StatusTooManyRequests, CodeMaxConcurrent, fmt.Sprintf("Max concurrent jobs (%d) reached", s.cfg.MaxConcurrent))
		return nil, "", false
	}
	timeout := s.cfg.DefaultTimeout.Duration
	if p.Timeout != nil {
		timeout = time.Duration(*p.Timeout * float64(time.Millisecond))
	}
	from := r.Header.Get("X-Loopsy-Node-Id")
	if from == "" {
		from = name
	}
	args := p.Args
	if args == nil {
		args = []string{}
	}
	e := &execution{stream: stream, limit: s.cfg.MaxOutputBytes, wake: make(chan struct{}, 1),
		info: jobInfo{Command: p.Command, Args: args, StartedAt: time.Now().UnixMilli(), FromNodeID: from, Stream: stream}}
	spec := api.JobSpec{Lane: s.cfg.ExecLane, Argv: append([]string{p.Command}, args...), Cwd: p.Cwd, Env: p.Env,
		TimeoutMs: uint64(max(timeout.Milliseconds(), 1)), ToolName: "loopsy", AgentID: from}
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 1)
	s.opts.Lanes.SubmitThen(spec, func(id string, err error) { ch <- res{id, err} })
	sr := <-ch
	if sr.err != nil {
		s.exec.submitted("", e)
		status, code := http.StatusInternalServerError, CodeExecFailed
		var ae *api.Error
		if errors.As(sr.err, &ae) {
			switch ae.Code {
			case api.CodeInvalidParams:
				status, code = http.StatusBadRequest, CodeInvalidRequest
			case api.CodeQueueFull:
				status, code = http.StatusTooManyRequests, CodeMaxConcurrent
			}
		}
		writeError(w, status, code, "Execution failed: "+sr.err.Error())
		return nil, "", false
	}
	e.info.JobID = sr.id
	info(r).jobID = sr.id
	s.exec.submitted(sr.id, e)
	s.emit(ExecStarted{JobID: sr.id, KeyName: name, Peer: r.RemoteAddr, Command: p.Command, Args: p.Args, Stream: stream})
	return e, sr.id, true
}

// wait returns a channel that gets the job's final record.
func (s *Server) wait(id string) <-chan api.JobRecord {
	done := make(chan api.JobRecord, 1)
	if _, err := s.opts.Lanes.Wait(id, func(rec api.JobRecord) { done <- rec }); err != nil {
		done <- api.JobRecord{ID: id, State: api.StateFailed, Error: err.Error()}
	}
	return done
}

func killed(rec api.JobRecord) bool { return rec.WasTimeout || rec.WasCancelled || rec.Signal != "" }

// execute is POST /execute: the command runs to its end; the answer has
// its output (each stream up to max_output_bytes; what was cut is said).
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	e, id, ok := s.start(w, r, false)
	if !ok {
		return
	}
	rec := <-s.wait(id)
	s.exec.finished(id)
	if rec.State == api.StateError {
		// It never ran (its command could not be run, its cwd is not
		// there...): upstream's spawn error, EXEC_FAILED. The store's
		// failure is ours.
		status := http.StatusBadRequest
		if strings.HasPrefix(rec.Error, "state store: ") {
			status = http.StatusInternalServerError
		}
		writeError(w, status, CodeExecFailed, "Execution failed: "+rec.Error)
		return
	}
	e.mu.Lock()
	body := map[string]any{"jobId": id, "exitCode": rec.ExitCode, "stdout": string(e.stdout), "stderr": string(e.stderr),
		"duration": rec.DurationMs, "killed": killed(rec)}
	if e.outCut > 0 {
		body["stdoutTruncatedBytes"] = e.outCut
	}
	if e.errCut > 0 {
		body["stderrTruncatedBytes"] = e.errCut
	}
	e.mu.Unlock()
	if rec.Error != "" {
		body["error"] = rec.Error
	}
	if rec.Signal != "" {
		body["signal"] = rec.Signal
	}
	writeJSON(w, http.StatusOK, body)
}

// executeStream is POST /execute/stream: server-sent events, one per
// output chunk as it comes ({type: stdout|stderr, data, jobId,
// timestamp}), then {type: exit}. A client that goes away cancels the job.
func (s *Server) executeStream(w http.ResponseWriter, r *http.Request) {
	e, id, ok := s.start(w, r, true)
	if !ok {
		return
	}
	defer s.exec.finished(id)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Loopsy-Job-Id", id)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	done := s.wait(id)
	var buf []byte
	send := func(typ, data string, extra map[string]any) bool {
		ev := map[string]any{"type": typ, "data": data, "jobId": id, "timestamp": time.Now().UnixMilli()}
		for k, v := range extra {
			ev[k] = v
		}
		b, _ := json.Marshal(ev)
		buf = append(append(append(buf[:0], "data: "...), b...), "\n\n"...)
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	flush := func() bool {
		cs, dropped := e.take()
		for _, c := range cs {
			if !send(c.Stream, c.Data, nil) {
				return false
			}
		}
		if dropped > 0 {
			return send("dropped", strconv.FormatInt(dropped, 10), map[string]any{"bytes": dropped})
		}
		return true
	}
	for {
		select {
		case <-e.wake:
			if !flush() {
				s.clientGone(id)
				<-done
				return
			}
		case rec := <-done:
			if !flush() {
				return
			}
			code := "null"
			if rec.ExitCode != nil {
				code = strconv.Itoa(int(*rec.ExitCode))
			}
			extra := map[string]any{"killed": killed(rec), "duration": rec.DurationMs}
			if rec.Signal != "" {
				extra["signal"] = rec.Signal
			}
			if rec.WasTimeout {
				extra["timedOut"] = true
			}
			if rec.Error != "" {
				extra["error"] = rec.Error
			}
			send("exit", code, extra)
			return
		case <-r.Context().Done():
			s.clientGone(id)
			<-done
			return
		}
	}
}

func (s *Server) clientGone(id string) {
	s.emit(ExecCancelled{JobID: id, Reason: "client_gone"})
	s.opts.Lanes.Cancel(id, func(bool, error) {})
}

// cancel is DELETE /execute/:jobId.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("jobId")
	info(r).jobID = id
	if s.exec.get(id) == nil {
		writeError(w, http.StatusNotFound, CodeJobNotFound, fmt.Sprintf("Job %s not found", id))
		return
	}
	type res struct{ err error }
	ch := make(chan res, 1)
	s.opts.Lanes.Cancel(id, func(_ bool, err error) { ch <- res{err} })
	if err := (<-ch).err; err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeInvalidState {
			writeError(w, http.StatusNotFound, CodeJobNotFound, fmt.Sprintf("Job %s not found (%s)", id, ae.Message))
			return
		}
		writeError(w, http.StatusInternalServerError, CodeInternal, "cancelling: "+err.Error())
		return
	}
	s.emit(ExecCancelled{JobID: id, KeyName: keyName(r), Reason: "cancelled"})
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "jobId": id})
}

// jobs is GET /execute/jobs: the executions running.
func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"jobs": s.exec.list()})
}
