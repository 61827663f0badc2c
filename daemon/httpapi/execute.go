package httpapi

import (
	"context"
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
	"unicode/utf8"
	"unsafe"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/wire"
)

// streamWriteTimeout bounds each write of a stream once its job has
// ended (the rest of its output to a client that stopped reading). While
// the job runs a stream's writes wait as long as the client does: a client
// that does not read stalls its job (the job's output is flow-controlled
// to it), until the job's timeout.
const streamWriteTimeout = 30 * time.Second

// sseChunk is the most output one /execute/stream event carries.
const sseChunk = 16 << 10

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

// execution is one command a peer asked for.
type execution struct {
	info jobInfo
}

// executions are the commands running, and bound how many run at once.
type executions struct {
	s *Server

	mu      sync.Mutex
	byID    map[string]*execution
	slots   int // taken: running or being submitted
	pending int // submissions not yet answered
	totalN  int
	closed  bool
}

func newExecutions(s *Server) *executions {
	return &executions{s: s, byID: map[string]*execution{}}
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

// submitted ends a submission: with an id, e is listed until finished;
// without, the slot is given back.
func (x *executions) submitted(id string, e *execution) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.pending--
	if id != "" {
		x.byID[id] = e
		x.totalN++
	} else {
		x.slots--
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
}

// start checks a request and runs its command as a job on the exec lane,
// a reader attached to its output from the first byte: the reader, or
// false once it answered the error.
func (s *Server) start(w http.ResponseWriter, r *http.Request, stream bool) (*lanes.OutputReader, string, bool) {
	if s.execOff != "" {
		writeError(w, http.StatusServiceUnavailable, CodeExecFailed, "Remote execution is off on this node: "+s.execOff)
		return nil, "", false
	}
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
	e := &execution{info: jobInfo{Command: p.Command, Args: args, StartedAt: time.Now().UnixMilli(), FromNodeID: from, Stream: stream}}
	spec := api.JobSpec{Lane: s.cfg.ExecLane, Argv: append([]string{p.Command}, args...), Cwd: p.Cwd, Env: p.Env,
		TimeoutMs: uint64(max(timeout.Milliseconds(), 1)), ToolName: "loopsy", AgentID: from}
	type res struct {
		id  string
		rd  *lanes.OutputReader
		err error
	}
	ch := make(chan res, 1)
	s.opts.Lanes.SubmitReading(spec, "http", func(id string, rd *lanes.OutputReader, err error) { ch <- res{id, rd, err} })
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
	return sr.rd, sr.id, true
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
// its output, each stream up to max_output_bytes (what was cut is said).
// Its reader takes every piece as it comes, so the job never waits for
// this request.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	rd, id, ok := s.start(w, r, false)
	if !ok {
		return
	}
	defer s.exec.finished(id)
	var out, errOut []byte
	var outCut, errCut int64
	// To the job's end (or the reader closed: what was read is the answer).
	_ = rd.ReadToEnd(context.Background(), func(p lanes.OutputPiece) error {
		buf, cut := &out, &outCut
		if p.Stream == lanes.StreamStderr {
			buf, cut = &errOut, &errCut
		}
		if p.Gap > 0 {
			*cut += p.Gap
			return nil
		}
		room := max(s.cfg.MaxOutputBytes-len(*buf), 0)
		*buf = append(*buf, p.Data[:min(room, len(p.Data))]...)
		*cut += int64(len(p.Data) - min(room, len(p.Data)))
		return nil
	})
	rd.Close("ended")
	rec := rd.Record()
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
	body := map[string]any{"jobId": id, "exitCode": rec.ExitCode, "stdout": string(out), "stderr": string(errOut),
		"duration": rec.DurationMs, "killed": killed(rec)}
	if outCut > 0 {
		body["stdoutTruncatedBytes"] = outCut
	}
	if errCut > 0 {
		body["stderrTruncatedBytes"] = errCut
	}
	if rec.Error != "" {
		body["error"] = rec.Error
	}
	if rec.Signal != "" {
		body["signal"] = rec.Signal
	}
	writeJSON(w, http.StatusOK, body)
}

// errClientGone stops an /execute/stream whose client no longer takes its
// events.
var errClientGone = errors.New("the stream's client went away")

// executeStream is POST /execute/stream: server-sent events, one per
// output chunk as it comes ({type: stdout|stderr, data, jobId,
// timestamp}), then {type: exit}. Every byte, at the client's pace: a
// client that does not read holds its job back (its output is
// flow-controlled to the stream), not the daemon's memory. One that goes
// away cancels the job.
func (s *Server) executeStream(w http.ResponseWriter, r *http.Request) {
	rd, id, ok := s.start(w, r, true)
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
	// Once the job has ended, the rest goes to a client that still reads,
	// each write within streamWriteTimeout.
	ended := s.wait(id)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ended:
			_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		case <-stop:
		}
	}()
	var buf []byte
	send := func(typ, data string, extra map[string]any) bool {
		ev := map[string]any{"type": typ, "data": data, "jobId": id, "timestamp": time.Now().UnixMilli()}
		for k, v := range extra {
			ev[k] = v
		}
		b, _ := json.Marshal(ev)
		buf = append(append(append(buf[:0], "data: "...), b...), "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// sendData is send for a piece of output, written by hand into the
	// one buffer: no copy of the bytes, no map.
	sendData := func(typ string, data []byte) bool {
		buf = append(buf[:0], `data: {"type":`...)
		buf = wire.AppendJSONString(buf, typ, true)
		buf = append(buf, `,"data":`...)
		buf = wire.AppendJSONString(buf, unsafe.String(unsafe.SliceData(data), len(data)), true)
		buf = append(buf, `,"jobId":`...)
		buf = wire.AppendJSONString(buf, id, true)
		buf = append(buf, `,"timestamp":`...)
		buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
		buf = append(buf, "}\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	err := rd.ReadToEnd(r.Context(), func(p lanes.OutputPiece) error {
		sent := true
		if p.Gap > 0 {
			sent = send("dropped", strconv.FormatInt(p.Gap, 10), map[string]any{"bytes": p.Gap})
		} else {
			stream := p.Stream
			if stream == lanes.StreamOutput {
				stream = lanes.StreamStdout
			}
			// At most sseChunk bytes an event: a NUL is six bytes of
			// JSON, and the line is held until the client takes it.
			for data := p.Data; sent && len(data) > 0; {
				n := min(len(data), sseChunk)
				for n < len(data) && n > sseChunk-utf8.UTFMax && !utf8.RuneStart(data[n]) {
					n-- // whole characters in each event
				}
				sent = sendData(stream, data[:n])
				data = data[n:]
			}
		}
		if !sent {
			return errClientGone
		}
		return nil
	})
	if err != nil {
		// The client went away (its request's context, a write that
		// failed) or the reader was closed.
		rd.Close("detached")
		s.clientGone(id)
		<-ended
		return
	}
	rd.Close("ended")
	rec := rd.Record()
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
