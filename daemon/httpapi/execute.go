package httpapi

import (
	"cmp"
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
	"github.com/orchestrd/orchestrd/wire"
)

// streamWriteTimeout bounds each write of a stream once its job has
// ended (the rest of its output to a client that stopped reading), unless
// Options.StreamWriteTimeout says otherwise. Each write, not the rest of
// the stream: a client that reads steadily but slowly gets all of it.
// While the job runs a stream's writes wait as long as the client does: a
// client that does not read stalls its job (the job's output is
// flow-controlled to it), until the job's timeout.
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
		x.s.cancelJob(context.Background(), id)
	}
}

// cancelJob asks job.cancel for job id.
func (s *Server) cancelJob(ctx context.Context, id string) error {
	return s.call(ctx, "job.cancel", map[string]any{"id": id}, nil)
}

// laneNames are the daemon's lanes (lane.list).
func (s *Server) laneNames() ([]string, error) {
	var ls struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	if err := s.call(context.Background(), "lane.list", nil, &ls); err != nil {
		return nil, fmt.Errorf("reading the lanes for /execute: %w", err)
	}
	names := make([]string, len(ls.Lanes))
	for i, l := range ls.Lanes {
		names[i] = l.Name
	}
	return names, nil
}

// The job's output streams (job.stream's pieces).
const (
	streamStdout = "stdout"
	streamStderr = "stderr"
	streamOutput = "output" // both, merged (a job run on a pty)
)

// pushed is one line job.stream sent ahead of its answer: the piece,
// and what to tell it once this request has taken it.
type pushed struct {
	data  []byte
	raw   []byte // a binary piece's bytes (its data says data_len)
	taken func(ok bool)
}

// rawCaller is a Caller that also hands job.stream's binary pieces over
// as they are (control.Server's InvokeRaw).
type rawCaller interface {
	InvokeRaw(ctx context.Context, from api.Origin, method string, params any,
		push func(event string, data []byte, taken func(ok bool)),
		pushRaw func(event string, data, raw []byte, taken func(ok bool))) (json.RawMessage, error)
}

// streamEnd is job.stream's answer.
type streamEnd struct {
	raw json.RawMessage
	err error
}

// jobRun is one command running as a job, its output coming from
// job.stream (submitted with it, so every byte from the first): each
// piece is taken by this request before the next comes, so a request that
// does not read holds the job back (its output is flow-controlled to it).
type jobRun struct {
	id     string
	pieces chan pushed
	end    chan streamEnd
	cancel context.CancelFunc // detaches the stream
}

// submit runs spec as a job through job.stream: the run, once the job is
// recorded, or the error that refused it. base ending detaches the
// stream. binary: its pieces as they are (job.stream's binary), where
// the Caller can.
func (s *Server) submit(base context.Context, spec api.JobSpec, binary bool) (*jobRun, error) {
	if s.opts.Caller == nil {
		return nil, errors.New("the HTTP API has no method table")
	}
	ctx, cancel := context.WithCancel(base)
	j := &jobRun{pieces: make(chan pushed), end: make(chan streamEnd, 1), cancel: cancel}
	push := func(_ string, data []byte, taken func(bool)) {
		select {
		case j.pieces <- pushed{data, nil, taken}:
		case <-ctx.Done():
			taken(false)
		}
	}
	rc, _ := s.opts.Caller.(rawCaller)
	go func() {
		if binary && rc != nil {
			pushRaw := func(_ string, data, raw []byte, taken func(bool)) {
				select {
				case j.pieces <- pushed{data, raw, taken}:
				case <-ctx.Done():
					taken(false)
				}
			}
			raw, err := rc.InvokeRaw(ctx, api.Origin{By: byHTTP}, "job.stream", map[string]any{"submit": spec, "binary": true}, push, pushRaw)
			j.end <- streamEnd{raw, err}
			return
		}
		raw, err := s.opts.Caller.Invoke(ctx, api.Origin{By: byHTTP}, "job.stream", map[string]any{"submit": spec}, push)
		j.end <- streamEnd{raw, err}
	}()
	// The first line names the job.
	select {
	case head := <-j.pieces:
		p, err := wire.DecodeStreamPiece(head.data) // the data is the pusher's again once taken
		head.taken(true)
		if err != nil || p.JobID == "" {
			cancel()
			return nil, fmt.Errorf("reading job.stream's first line: %q (%v)", head.data, err)
		}
		j.id = p.JobID
		return j, nil
	case e := <-j.end:
		cancel()
		if e.err == nil {
			e.err = errors.New("job.stream answered before it named its job")
		}
		return nil, e.err
	}
}

// read gives f each piece of the job's output, in order, until the job
// has ended and every byte is read: the job's final record. f's error, or
// the stream's (base ended), stops it, the stream detached.
func (j *jobRun) read(f func(p wire.StreamPiece) error) (api.JobRecord, error) {
	for {
		select {
		case pc := <-j.pieces:
			p, err := wire.DecodeStreamPiece(pc.data)
			if err == nil {
				if pc.raw != nil {
					p.Data = pc.raw
				}
				err = f(p)
			}
			if err != nil {
				pc.taken(false)
				j.cancel()
				return api.JobRecord{}, err
			}
			pc.taken(true)
		case e := <-j.end:
			// Every piece was taken before the answer (a push waits
			// for this request).
			j.cancel()
			if e.err != nil {
				return api.JobRecord{}, e.err
			}
			var res struct {
				Job api.JobRecord `json:"job"`
			}
			if err := json.Unmarshal(e.raw, &res); err != nil {
				return api.JobRecord{}, fmt.Errorf("reading job.stream's answer: %w", err)
			}
			return res.Job, nil
		}
	}
}

// start checks a request and runs its command as a job on the exec lane,
// its output read from the first byte: the run, or false once it answered
// the error. base ending detaches the run's stream.
func (s *Server) start(w http.ResponseWriter, r *http.Request, base context.Context, stream, binary bool) (*jobRun, bool) {
	if s.execOff != "" {
		writeError(w, http.StatusServiceUnavailable, CodeExecFailed, "Remote execution is off on this node: "+s.execOff)
		return nil, false
	}
	var p executeParams
	if !decodeBody(w, r, &p) {
		return nil, false
	}
	if err := p.check(); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return nil, false
	}
	name := keyName(r)
	cmdBase := path.Base(p.Command)
	if slices.Contains(s.cfg.Denylist, cmdBase) {
		s.emit(ExecDenied{KeyName: name, Peer: r.RemoteAddr, Command: p.Command, Reason: "denylist"})
		writeError(w, http.StatusForbidden, CodeCommandDenied, fmt.Sprintf("Command '%s' is denied", cmdBase))
		return nil, false
	}
	if !s.exec.reserve() {
		s.emit(ExecDenied{KeyName: name, Peer: r.RemoteAddr, Command: p.Command, Reason: "max_concurrent"})
		writeError(w, http.StatusTooManyRequests, CodeMaxConcurrent, fmt.Sprintf("Max concurrent jobs (%d) reached", s.cfg.MaxConcurrent))
		return nil, false
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
	j, err := s.submit(base, spec, binary)
	if err != nil {
		s.exec.submitted("", e)
		status, code := http.StatusInternalServerError, CodeExecFailed
		var ae *api.Error
		if errors.As(err, &ae) {
			switch ae.Code {
			case api.CodeInvalidParams:
				status, code = http.StatusBadRequest, CodeInvalidRequest
			case api.CodeQueueFull:
				status, code = http.StatusTooManyRequests, CodeMaxConcurrent
			}
		}
		writeError(w, status, code, "Execution failed: "+err.Error())
		return nil, false
	}
	e.info.JobID = j.id
	info(r).jobID = j.id
	s.exec.submitted(j.id, e)
	s.emit(ExecStarted{JobID: j.id, KeyName: name, Peer: r.RemoteAddr, Command: p.Command, Args: p.Args, Stream: stream})
	return j, true
}

// wait returns a channel closed once job id has ended (job.wait), or
// ctx ended.
func (s *Server) wait(ctx context.Context, id string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.call(ctx, "job.wait", map[string]any{"id": id, "output": false}, nil)
	}()
	return done
}

func killed(rec api.JobRecord) bool { return rec.WasTimeout || rec.WasCancelled || rec.Signal != "" }

// execute is POST /execute: the command runs to its end; the answer has
// its output, each stream up to max_output_bytes (what was cut is said).
// Its reader takes every piece as it comes, so the job never waits for
// this request.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	j, ok := s.start(w, r, context.Background(), false, false)
	if !ok {
		return
	}
	id := j.id
	defer s.exec.finished(id)
	var out, errOut []byte
	var outCut, errCut int64
	// To the job's end.
	rec, err := j.read(func(p wire.StreamPiece) error {
		buf, cut := &out, &outCut
		if p.Stream == streamStderr {
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
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeExecFailed, "Execution failed: reading the job's output: "+err.Error())
		return
	}
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
	binary := wantsExecFrames(r)
	j, ok := s.start(w, r, r.Context(), true, binary)
	if !ok {
		return
	}
	id := j.id
	defer s.exec.finished(id)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	if binary {
		h.Set("Content-Type", wire.ExecStreamType)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Loopsy-Job-Id", id)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	// Once the job has ended, the rest goes to a client that still reads,
	// each write within writeTimeout: set before each write from then on
	// (deadline), and by the watcher below for a write the end finds
	// waiting.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	ended := s.wait(wctx, id)
	writeTimeout := cmp.Or(s.opts.StreamWriteTimeout, streamWriteTimeout)
	deadline := func() {
		select {
		case <-ended:
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		default:
		}
	}
	// The deadline is set before the handler returns, never after: net/http
	// clears it when the response is done, and one set later would stay on
	// the kept-alive connection and cut the next response sent on it.
	stop, watched := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-watched }()
	go func() {
		defer close(watched)
		select {
		case <-ended:
			select {
			case <-stop:
			default:
				_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			}
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
		deadline()
		if binary {
			kind, payload := wire.ExecExit, b
			if typ == "dropped" {
				kind, payload = wire.ExecGap, []byte(data)
			}
			buf = append(wire.AppendExecFrameHeader(buf[:0], kind, len(payload)), payload...)
		} else {
			buf = append(append(append(buf[:0], "data: "...), b...), "\n\n"...)
		}
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// sendFrame is a piece of output in the binary framing: its header,
	// then its bytes as they are, in one chunk of the response.
	sendFrame := func(typ string, data []byte) bool {
		kind := wire.ExecStdout
		if typ == streamStderr {
			kind = wire.ExecStderr
		}
		buf = wire.AppendExecFrameHeader(buf[:0], kind, len(data))
		deadline()
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if _, err := w.Write(data); err != nil {
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
		deadline()
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	rec, err := j.read(func(p wire.StreamPiece) error {
		sent := true
		if p.Gap > 0 {
			sent = send("dropped", strconv.FormatInt(p.Gap, 10), map[string]any{"bytes": p.Gap})
		} else {
			stream := p.Stream
			if stream == streamOutput {
				stream = streamStdout
			}
			if binary {
				if sent = sendFrame(stream, p.Data); !sent {
					return errClientGone
				}
				return nil
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
		// failed) or the stream ended without its answer.
		s.clientGone(id)
		<-ended
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
}

// wantsExecFrames: the request asks for /execute/stream's binary framing
// (Accept: wire.ExecStreamType) rather than server-sent events.
func wantsExecFrames(r *http.Request) bool {
	for _, a := range r.Header.Values("Accept") {
		for _, t := range strings.Split(a, ",") {
			if mt, _, _ := strings.Cut(strings.TrimSpace(t), ";"); strings.EqualFold(mt, wire.ExecStreamType) {
				return true
			}
		}
	}
	return false
}

func (s *Server) clientGone(id string) {
	s.emit(ExecCancelled{JobID: id, Reason: "client_gone"})
	_ = s.cancelJob(context.Background(), id)
}

// cancel is DELETE /execute/:jobId.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("jobId")
	info(r).jobID = id
	if s.exec.get(id) == nil {
		writeError(w, http.StatusNotFound, CodeJobNotFound, fmt.Sprintf("Job %s not found", id))
		return
	}
	if err := s.cancelJob(r.Context(), id); err != nil {
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
