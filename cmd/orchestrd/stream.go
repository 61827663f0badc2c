package main

// run and logs read a job's output through job.stream: every byte, at
// this client's pace (the job waits for it), or a line saying what did
// not come. run streams its stdin to the job through job.stdin.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/wire"
)

// streamAnswer is job.stream's answer.
type streamAnswer struct {
	Job    api.JobRecord `json:"job"`
	Bytes  int64         `json:"bytes"`
	Missed int64         `json:"missed"`
}

// streamReader follows one job.stream call on c.
type streamReader struct {
	c      *client.Client
	stdout io.Writer
	stderr io.Writer
	// allToStdout: every stream to stdout (logs); else stderr to stderr.
	allToStdout bool
	jobID       string
	next        int64 // the offset expected next
	received    int64
	missed      int64
	reasons     map[string]bool // why bytes were missed
	writeErr    error
}

// line handles one pushed event; it reports whether it was this stream's.
func (s *streamReader) line(ev wire.Event) bool {
	if ev.Event != lanes.StreamEvent {
		return false
	}
	l, err := wire.DecodeStreamPiece(ev.Data)
	if err != nil || (s.jobID != "" && l.JobID != s.jobID) {
		return false
	}
	if s.jobID == "" {
		s.jobID = l.JobID
	}
	if l.Offset > s.next { // cannot happen: the daemon says every gap
		s.miss(l.Offset-s.next, "unknown")
	}
	if l.Gap > 0 {
		s.miss(l.Gap, l.Reason)
		s.next = l.Offset + l.Gap
		return true
	}
	data := l.Data
	if ev.Raw != nil { // binary: the bytes followed the line
		data = ev.Raw
	}
	if len(data) == 0 {
		return true
	}
	w := s.stdout
	if l.Stream == lanes.StreamStderr && !s.allToStdout {
		w = s.stderr
	}
	if s.writeErr == nil {
		_, s.writeErr = w.Write(data)
	}
	if ev.Raw != nil {
		s.c.ReleaseRaw(ev.Raw) // written: its buffer serves a later piece
	}
	s.received += int64(len(data))
	s.next = l.Offset + int64(len(data))
	return true
}

func (s *streamReader) miss(n int64, reason string) {
	s.missed += n
	if s.reasons == nil {
		s.reasons = map[string]bool{}
	}
	s.reasons[reason] = true
}

// drain handles the lines already buffered: they all came before the
// call's answer, which the client reads after them.
func (s *streamReader) drain(events <-chan wire.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			s.line(ev)
		default:
			return
		}
	}
}

// incomplete says, in one line on stderr, what did not reach this client;
// false when everything did.
func (s *streamReader) incomplete(rec api.JobRecord, who string) bool {
	total := max(rec.OutputBytes, s.received+s.missed)
	if rec.State == api.StateError {
		total = s.received + s.missed // its output is why it could not run
	}
	if s.missed == 0 && s.received >= total && !rec.OutputCut {
		return false
	}
	var why []string
	if rec.OutputCut {
		why = append(why, "something that outlived the job held its output open, and what it wrote after the job was not read")
	}
	if s.reasons[lanes.GapBehind] {
		why = append(why, "the daemon could not hold more for this client: the job's runner does not take flow control")
	}
	if s.reasons[lanes.GapNotKept] {
		switch {
		case rec.OutputEvicted:
			why = append(why, "the rest was not kept")
		default:
			why = append(why, "the record keeps the first max_output_bytes")
		}
	}
	if len(why) == 0 {
		why = append(why, "the stream ended early")
	}
	if s.missed == 0 && s.received >= total {
		fmt.Fprintf(s.stderr, "orchestrd: output of job %s may be incomplete: %d bytes %s (%s)\n",
			rec.ID, s.received, who, strings.Join(why, "; "))
		return true
	}
	fmt.Fprintf(s.stderr, "orchestrd: output of job %s is incomplete: %d of %d bytes %s (%s)\n",
		rec.ID, s.received, total, who, strings.Join(why, "; "))
	return true
}

// oneProc has the rest of this process run on one P (GOMAXPROCS 1) unless
// the user set GOMAXPROCS. run and logs move bytes: the connection's
// reader hands each piece to the goroutine writing stdout. With a P each,
// every hand-off wakes a second thread (a futex) and the idle one spins
// looking for work: half the client's CPU a MiB, and wake-ups the daemon,
// the runner and the job wait behind on a machine with few cores. On one P
// the hand-off is a switch between goroutines on the same thread.
func oneProc() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

// run submits the job through job.stream and follows it to its end:
// every byte to stdout and stderr, stdin (when given) streamed to it,
// Ctrl-C cancels it (SIGTERM, its kill grace, SIGKILL; a second Ctrl-C
// SIGKILL at once), a job still queued after a second is explained. It
// returns the exit code.
func (r *jobFollower) run(spec api.JobSpec, stdin *os.File, sig <-chan os.Signal) int {
	s := &streamReader{c: r.c, stdout: r.stdout, stderr: r.stderr}
	answered := make(chan error, 1)
	var ans streamAnswer
	go func() {
		answered <- r.c.Call(context.Background(), "job.stream", map[string]any{"submit": spec, "stdin": stdin != nil, "binary": true}, &ans)
	}()
	events := r.c.Events()
	r.cancelled = make(chan cancelAnswer, 2) // at most two cancels are sent
	stdinLost := make(chan error, 1)
	var noticeAt <-chan time.Time
	notice := make(chan string, 1)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil // the answer says why
				continue
			}
			known := s.jobID != ""
			if !s.line(ev) {
				continue
			}
			if !r.pipeBroken && errors.Is(s.writeErr, syscall.EPIPE) {
				// Its reader has gone: the job is cancelled, as SIGPIPE
				// would have ended it, once (a Ctrl-C may have asked).
				r.pipeBroken = true
				if r.interrupts == 0 {
					r.cancel(false)
				}
			}
			if known || s.jobID == "" {
				continue
			}
			// The first line: the job is accepted.
			r.jobID = s.jobID
			if r.interrupts > 0 {
				r.cancel(r.interrupts > 1)
			}
			if stdin != nil {
				go sendStdin(r.c, r.jobID, stdin, stdinLost)
			}
			t := time.NewTimer(queuedAfter)
			defer t.Stop()
			noticeAt = t.C
		case err := <-answered:
			if err != nil {
				var we *wire.Error
				if errors.As(err, &we) {
					return callErr(r.stderr, err)
				}
				fmt.Fprintf(r.stderr, "orchestrd: lost the connection to the daemon: %v\n", err)
				return exitFailure
			}
			s.drain(events)
			if r.pipeBroken || errors.Is(s.writeErr, syscall.EPIPE) {
				return exitBrokenPipe // the job ended before its cancel
			}
			code := r.end(s, ans)
			select {
			case err := <-stdinLost:
				// What it had to read did not reach it: said, non-zero.
				fmt.Fprintf(r.stderr, "orchestrd: stdin did not reach job %s: %s\n", r.jobID, errMessage(err))
				if code == exitOK {
					code = exitFailure
				}
			default:
			}
			return code
		case <-noticeAt:
			noticeAt = nil
			go func(id string) { notice <- queuedNotice(r.c, id) }(r.jobID)
		case msg := <-notice:
			if msg != "" {
				fmt.Fprintln(r.stderr, msg)
			}
		case <-sig:
			r.interrupts++
			// Without the id yet, it is cancelled as soon as the id is
			// known; past the second Ctrl-C there is nothing more to ask.
			// run still ends with the job, its last output included.
			if r.jobID != "" && r.interrupts <= 2 {
				r.cancel(r.interrupts > 1)
			}
		case a := <-r.cancelled:
			if r.pipeBroken {
				// The daemon has it (SIGTERM, its grace, SIGKILL), or it
				// had ended; a cancel that failed otherwise is said.
				var we *wire.Error
				if a.err != nil && (!errors.As(a.err, &we) || we.Code != wire.CodeInvalidState) {
					fmt.Fprintf(r.stderr, "orchestrd: the output's reader has gone; cancelling job %s: %s\n", r.jobID, errMessage(a.err))
				}
				return exitBrokenPipe
			}
			if code, done := r.cancelAnswered(a); done {
				return code
			}
		}
	}
}

// end reports the job's end as run does, and makes the exit code non-zero
// when the output did not all arrive.
func (r *jobFollower) end(s *streamReader, ans streamAnswer) int {
	rec := ans.Job
	incomplete := s.incomplete(rec, "reached this client")
	if s.writeErr != nil {
		fmt.Fprintf(r.stderr, "orchestrd: writing the output of job %s: %v\n", rec.ID, s.writeErr)
		incomplete = true
	}
	r.received = s.received // finished's completeOutput has nothing more to say
	rec.OutputBytes = min(rec.OutputBytes, s.received)
	code := r.finished(rec)
	if incomplete && code == exitOK {
		code = exitFailure
	}
	return code
}

// stdinPiece is how much of run's stdin one job.stdin call carries.
const stdinPiece = 128 << 10

// sendStdin streams f to job id's stdin, one job.stdin call at a time
// (each answered once its piece is on its way: the job's pace), then its
// end. It stops at the first error: the job has ended (it read what it
// wanted), or the connection; lost hears of data the job's runner could
// not take at all (it takes no streamed stdin).
func sendStdin(c *client.Client, id string, f *os.File, lost chan<- error) {
	buf := make([]byte, stdinPiece)
	for {
		n, rerr := f.Read(buf)
		params := map[string]any{"id": id}
		if n > 0 {
			if utf8.Valid(buf[:n]) {
				params["data"] = string(buf[:n])
			} else {
				params["data_b64"] = buf[:n]
			}
		}
		if rerr != nil {
			params["eof"] = true
		}
		if n > 0 || rerr != nil {
			if err := c.Call(context.Background(), "job.stdin", params, nil); err != nil {
				var we *wire.Error
				if errors.As(err, &we) && n > 0 {
					if d, ok := we.Data.(map[string]any); ok && d["stdin"] == "unsupported" {
						lost <- err
					}
				}
				return
			}
		}
		if rerr != nil {
			return
		}
	}
}

// ---- logs ----

const logsUsage = `orchestrd logs [--home DIR] [-f] ID

Writes job ID's output to stdout, byte for byte, stdout and stderr as the
job wrote them: a finished job's from its record (the first
max_output_bytes; when the record kept less than the job wrote, one line on
stderr says so and the exit code is non-zero), a running job's as kept so
far; with -f, a running job's until it ends, every byte from now on. Exits
with the job's exit code as run does (0 while it runs, without -f).`

// cmdLogs is `orchestrd logs`.
func cmdLogs(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("logs")
	home := homeFlag(fs)
	follow := fs.Bool("f", false, "follow a running job until it ends")
	fs.BoolVar(follow, "follow", false, "the same as -f")
	c, id, code, ok := parseOneIDAndDial(fs, logsUsage, args, home, "want one job ID", stdout, stderr, jobIDs)
	if !ok {
		return code
	}
	defer c.Close()
	oneProc()
	s := &streamReader{c: c, stdout: stdout, stderr: stderr, allToStdout: true, jobID: id}
	var ans streamAnswer
	answered := make(chan error, 1)
	go func() {
		answered <- c.Call(context.Background(), "job.stream", map[string]any{"id": id, "follow": *follow, "binary": true}, &ans)
	}()
	events := c.Events()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			s.line(ev)
		case err := <-answered:
			if err != nil {
				return callErr(stderr, err)
			}
			s.drain(events)
			rec := ans.Job
			incomplete := s.incomplete(rec, "kept")
			if s.writeErr != nil {
				fmt.Fprintf(stderr, "orchestrd: writing the output of job %s: %v\n", id, s.writeErr)
				incomplete = true
			}
			code := exitOK
			if rec.State.Terminal() {
				f := &jobFollower{c: c, stdout: io.Discard, stderr: stderr, received: s.received}
				rec.OutputBytes = min(rec.OutputBytes, s.received)
				code = f.finished(rec)
			}
			if incomplete && code == exitOK {
				code = exitFailure
			}
			return code
		}
	}
}
