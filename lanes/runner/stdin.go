package runner

import (
	"os"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

// jobStdin is a job's standard input: /dev/null, or the read end of a pipe
// that the job's input is written into on a goroutine: all of it at once
// (Job.stdin_b64), or as it comes (Job.stdin_stream, feed).
type jobStdin struct {
	j       *job
	r, w    *os.File // the pipe; nil for /dev/null
	devNull *os.File
	data    []byte
	stream  *stdinStream
	done    chan struct{} // closed when the writer is finished
}

// openStdin prepares the job's stdin; call stop when the job is over.
func (j *job) openStdin() (*jobStdin, error) {
	in := &jobStdin{j: j, devNull: j.r.devNull, data: j.stdin, stream: j.in}
	if len(in.data) == 0 && in.stream == nil {
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
	if in.stream != nil {
		go in.feed()
		return
	}
	go func() {
		defer close(in.done)
		_, _ = in.w.Write(in.data) // EPIPE once the job is gone: nothing to do
		in.w.Close()
	}()
}

// feed writes the chunks of a streamed stdin into the job's pipe as they
// come, acknowledging each once written, until EOF (the pipe is closed)
// or the job is over. Once the job no longer reads (EPIPE: it closed its
// stdin or exited) the rest is acknowledged unwritten, so the sender is
// never held up by a job that stopped listening.
func (in *jobStdin) feed() {
	defer close(in.done)
	defer in.w.Close()
	var done uint64
	broken := false
	for {
		data, eof, ok := in.stream.next()
		if !ok || eof {
			return
		}
		if !broken {
			if _, err := in.w.Write(data); err != nil {
				broken = true
			}
		}
		done += uint64(len(data))
		_ = in.j.r.send(wire.TypeStdinAck, wire.StdinAck{JobID: in.j.id, Bytes: done})
	}
}

// stop ends the writer if it is still blocked (a process that left the
// job's group may hold the pipe without reading it) and releases the pipe.
func (in *jobStdin) stop() {
	if in.stream != nil {
		in.stream.close()
	}
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
