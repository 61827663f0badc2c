package executors

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// stderrTail is an executor's stderr: a pipe whose write end the process
// inherits (a file, so that no copy of the daemon's waits on it), read
// here into the daemon's stderr (when it has one) while its last lines are
// kept, so that an executor that exits before it connects can say why
// (executor.exited's stderr, the log, a crash-looping pool's tasks).
type stderrTail struct {
	r, w *os.File
	to   io.Writer

	mu   sync.Mutex // held while a chunk is taken in
	last []byte     // the last tailBytes bytes read
	done chan struct{}
}

const (
	tailBytes = 4096 // kept of an executor's stderr
	tailLines = 5    // shown of it
	tailLine  = 300  // bytes of one line shown
)

// newStderrTail makes the pipe; to (nil: nothing) gets every byte too.
func newStderrTail(to io.Writer) (*stderrTail, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t := &stderrTail{r: r, w: w, to: to, done: make(chan struct{})}
	go t.read()
	return t, nil
}

func (t *stderrTail) read() {
	defer close(t.done)
	defer t.r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := t.r.Read(buf)
		if n > 0 {
			t.mu.Lock()
			t.last = append(t.last, buf[:n]...)
			if len(t.last) > tailBytes {
				t.last = append(t.last[:0], t.last[len(t.last)-tailBytes:]...)
			}
			if t.to != nil {
				_, _ = t.to.Write(buf[:n])
			}
			t.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// started closes the daemon's copy of the write end (the process has
// its own now, or never will).
func (t *stderrTail) started() { t.w.Close() }

// settle waits (at most 200 ms) until what the dead process wrote has
// been taken in: every writer is gone and the reader has read to the
// end. (The pipe holding no byte was not enough: the reader may have read
// the last chunk and not yet taken it in.) A writer that outlives the
// process (a child it left, holding its stderr) costs the 200 ms; what
// was read by then is kept.
func (t *stderrTail) settle() {
	timer := time.NewTimer(200 * time.Millisecond)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
	}
	t.mu.Lock() // a chunk being taken in is in
	t.mu.Unlock()
}

// lines is the last lines of what was read, each at most tailLine bytes,
// control characters and invalid UTF-8 shown as '?': what the executor's
// program wrote before it connected (its own or sandbox-exec's words),
// bounded and inert in a log or an event.
func (t *stderrTail) lines() []string {
	t.mu.Lock()
	b := bytes.TrimRight(t.last, "\n")
	t.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	all := bytes.Split(b, []byte{'\n'})
	if len(all) > tailLines {
		all = all[len(all)-tailLines:]
	}
	out := make([]string, 0, len(all))
	for _, l := range all {
		if len(l) > tailLine {
			l = l[:tailLine]
		}
		s := strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == utf8.RuneError || (r >= 0x80 && r < 0xa0) {
				return '?'
			}
			return r
		}, strings.ToValidUTF8(string(l), "\uFFFD"))
		out = append(out, s)
	}
	return out
}
