package runner

import (
	"os"
	"time"
)

// jobStdin is a job's standard input: /dev/null, or the read end of a pipe
// the job's input (Job.stdin_b64) is written into on a goroutine.
type jobStdin struct {
	r, w    *os.File // the pipe; nil for /dev/null
	devNull *os.File
	data    []byte
	done    chan struct{} // closed when the writer is finished
}

// openStdin prepares the job's stdin; call stop when the job is over.
func (j *job) openStdin() (*jobStdin, error) {
	in := &jobStdin{devNull: j.r.devNull, data: j.stdin}
	if len(in.data) == 0 {
		return in, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	in.r, in.w = r, w
	return in, nil
}

// file is what the job gets as fd 0.
func (in *jobStdin) file() *os.File {
	if in.r == nil {
		return in.devNull
	}
	return in.r
}

// started is called once the job's process exists: the runner's copy of
// the read end is closed (so a job that exits unblocks the writer with
// EPIPE) and the input is written, then the pipe closed, so the job reads
// it to EOF. A job that never reads its stdin is not waited for.
func (in *jobStdin) started() {
	if in.r == nil {
		return
	}
	in.r.Close()
	in.r = nil
	in.done = make(chan struct{})
	go func() {
		defer close(in.done)
		_, _ = in.w.Write(in.data) // EPIPE once the job is gone: nothing to do
		in.w.Close()
	}()
}

// stop ends the writer if it is still blocked (a process that left the
// job's group may hold the pipe without reading it) and releases the pipe.
func (in *jobStdin) stop() {
	if in.done != nil {
		_ = in.w.SetWriteDeadline(time.Unix(1, 0))
		<-in.done
		return
	}
	if in.r != nil {
		in.r.Close()
	}
	if in.w != nil {
		in.w.Close()
	}
}
