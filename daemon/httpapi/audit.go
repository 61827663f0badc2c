package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// AuditFile is the request log in the daemon's home.
const AuditFile = "audit.jsonl"

// auditQueue bounds the lines waiting for the writer; past it lines are
// counted and the count written as a line of its own ({"dropped": N}), so
// a burst never blocks a request and a loss is said where the reader looks.
const auditQueue = 8192

// auditBatch is how long the writer lets lines gather after a write: a
// line is in the file at most this long (and the time to write it) after
// its request was answered.
const auditBatch = 5 * time.Millisecond

// auditLine is one request. The key is never in it, only its name.
type auditLine struct {
	Time     string `json:"time"`
	Peer     string `json:"peer"`
	KeyName  string `json:"key_name,omitempty"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	JobID    string `json:"job_id,omitempty"`
	Duration int64  `json:"duration_ms"`
	Bytes    int64  `json:"bytes,omitempty"` // of the answer's body
}

// audit appends lines to home/audit.jsonl (0600) from one goroutine,
// rotating past MaxBytes and keeping Keep old files.
type audit struct {
	path string
	cfg  AuditConfig
	log  zerolog.Logger
	q    chan auditLine
	done chan struct{}

	mu      sync.Mutex
	dropped int64
	closed  bool
}

func openAudit(home string, cfg AuditConfig, log zerolog.Logger) *audit {
	a := &audit{path: filepath.Join(home, AuditFile), cfg: cfg, log: log, q: make(chan auditLine, auditQueue), done: make(chan struct{})}
	go a.run()
	return a
}

// add queues l without blocking.
func (a *audit) add(l auditLine) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	select {
	case a.q <- l:
	default:
		a.dropped++
	}
}

// close writes what is queued and stops.
func (a *audit) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.q)
	}
	a.mu.Unlock()
	<-a.done
}

func (a *audit) run() {
	defer close(a.done)
	var f *os.File
	var bw *bufio.Writer
	var size int64
	open := func() bool {
		var err error
		f, err = os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			a.log.Error().Err(err).Str("path", a.path).Msg("http: opening the audit log")
			return false
		}
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		bw = bufio.NewWriterSize(f, 64<<10)
		return true
	}
	failed := false
	write := func(b []byte) {
		if f == nil && !open() {
			failed = true
			return
		}
		if size+int64(len(b)) > a.cfg.MaxBytes && size > 0 {
			bw.Flush()
			f.Close()
			f = nil
			if err := eventlog.RotateFiles(a.path, a.cfg.Keep, func(err error) {
				a.log.Warn().Err(err).Str("path", a.path).Msg("http: rotating the audit log")
			}); err != nil {
				a.log.Error().Err(err).Str("path", a.path).Msg("http: rotating the audit log")
			}
			if !open() {
				failed = true
				return
			}
		}
		n, err := bw.Write(b)
		size += int64(n)
		if err != nil && !failed {
			failed = true
			a.log.Error().Err(err).Str("path", a.path).Msg("http: writing the audit log")
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // a line: the JSON of json.Marshal, then \n
	line := func(v any) {
		buf.Reset()
		_ = enc.Encode(v)
		write(buf.Bytes())
	}
	for more := true; more; {
		// One wake takes every line queued, then sleeps a moment while
		// the lines of a burst queue up: one wake and one write to the
		// file for many requests, not one each.
		for l, ok := <-a.q; ; l, ok = <-a.q {
			if !ok {
				more = false
				break
			}
			line(l)
			if len(a.q) == 0 { // this goroutine alone receives
				break
			}
		}
		a.mu.Lock()
		d := a.dropped
		a.dropped = 0
		a.mu.Unlock()
		if d > 0 {
			line(map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "dropped": d})
		}
		if bw != nil {
			bw.Flush()
		}
		if more {
			time.Sleep(auditBatch)
		}
	}
	if f != nil {
		bw.Flush()
		f.Close()
	}
}

// reqInfo is what handlers tell the audit of a request.
type reqInfo struct {
	keyName string
	jobID   string
}

type infoKey struct{}

func info(r *http.Request) *reqInfo {
	i, _ := r.Context().Value(infoKey{}).(*reqInfo)
	if i == nil {
		return &reqInfo{}
	}
	return i
}

// recorder keeps the status and size of an answer; Unwrap lets the
// handlers' ResponseController reach the connection (deadlines, Flush).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (rw *recorder) WriteHeader(code int) {
	if rw.status == 0 {
		rw.status = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	n, err := rw.ResponseWriter.Write(p)
	rw.bytes += int64(n)
	return n, err
}

func (rw *recorder) Flush() {
	if f, ok := rw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }
