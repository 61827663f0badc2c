package executors

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/ptyfd"
	"github.com/orchestrd/orchestrd/wire"
)

// A terminal is a shell on a PTY that an executor spawned (spawn_terminal)
// and whose master descriptor it passed to the daemon. The daemon owns the
// master: one actor per terminal, under its pool, owns its lifecycle; a
// reader goroutine moves the PTY's output into a bounded buffer that
// clients read by offset (terminal.read), and a writer goroutine writes
// what they send (terminal.write). When the buffer is full the reader
// stops reading the master, so a shell that writes faster than its client
// reads blocks in the kernel, as on a real terminal: nothing is dropped
// and the daemon does not grow.

const (
	// termBufMax bounds the output a terminal holds for its client.
	termBufMax = 256 << 10
	// termReadMax bounds what one terminal.read returns.
	termReadMax = 64 << 10
	// termWriteMax bounds one terminal.write.
	termWriteMax = 64 << 10
	// termInQueue bounds the writes waiting for the PTY.
	termInQueue = 16
	// termAttachTimeout: a terminal nobody waits on (terminal.wait) this
	// long after it opened is closed.
	termAttachTimeout = 10 * time.Second
	// termKeep: how long a closed terminal stays readable (its last
	// output, its status).
	termKeep = time.Minute
)

// terminal is one terminal; its fields under mu are shared by its actor,
// its two goroutines and the control-socket handlers.
type terminal struct {
	m     *Manager
	f     *os.File
	owner actors.Ref // the executor actor that spawned it
	ref   actors.Ref

	mu       sync.Mutex
	room     *sync.Cond // the reader waits for room in buf
	st       api.TerminalStatus
	buf      []byte // output bytes [start, start+len(buf))
	start    int64
	eof      bool // the master's read ended
	ended    bool // closed: st.Reason says why
	readers  map[*termRead]struct{}
	waiters  map[api.Call]struct{}
	attached bool // someone waited on it
	in       chan termInput
	inClosed bool
}

type termRead struct {
	call   api.Call
	offset int64
	max    int
}

type termInput struct {
	b    []byte
	call api.Call
}

// Messages of a terminal's actor.
type (
	termEnd     struct{ reason string }
	attachCheck struct{}
)

// termActor owns a terminal's lifecycle.
type termActor struct{ t *terminal }

func (a *termActor) Receive(c *actors.Context) {
	t := a.t
	switch msg := c.Message().(type) {
	case actors.Started:
		go t.readLoop(c.Self())
		go t.writeLoop()
		c.After(termAttachTimeout, attachCheck{})
	case attachCheck:
		t.mu.Lock()
		attached := t.attached
		t.mu.Unlock()
		if !attached {
			t.end(api.TermNotAttached)
			c.StopSelf()
		}
	case termEnd:
		t.end(msg.reason)
		c.StopSelf()
	case actors.Stopping:
		t.end(api.TermDaemonShutdown)
	}
}

func newTerminal(m *Manager, f *os.File, st api.TerminalStatus, owner actors.Ref) *terminal {
	t := &terminal{m: m, f: f, st: st, owner: owner,
		readers: map[*termRead]struct{}{}, waiters: map[api.Call]struct{}{}, in: make(chan termInput, termInQueue)}
	t.room = sync.NewCond(&t.mu)
	return t
}

// readLoop moves the PTY's output into buf while there is room.
func (t *terminal) readLoop(self actors.Ref) {
	chunk := make([]byte, 32<<10)
	for {
		t.mu.Lock()
		for len(t.buf) >= termBufMax && !t.ended {
			t.room.Wait()
		}
		if t.ended {
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		n, err := t.f.Read(chunk[:min(len(chunk), termBufMax-t.bufLen())])
		t.mu.Lock()
		if n > 0 {
			t.buf = append(t.buf, chunk[:n]...)
			t.st.BytesOut += int64(n)
		}
		if err != nil {
			// EIO: every process let go of the PTY's other side.
			t.eof = true
		}
		t.answerReaders()
		ended := t.ended
		t.mu.Unlock()
		if err != nil {
			if !ended { // else end closed the PTY under this read
				t.m.sys.Send(self, termEnd{reason: api.TermExited})
			}
			return
		}
	}
}

func (t *terminal) bufLen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buf)
}

// writeLoop writes the clients' input to the PTY, answering each write
// once it is written.
func (t *terminal) writeLoop() {
	for x := range t.in {
		n, err := t.f.Write(x.b)
		t.mu.Lock()
		t.st.BytesIn += int64(n)
		t.mu.Unlock()
		if err != nil {
			x.call.Fail(api.Errorf(api.CodeInvalidState, "terminal %s: writing to the PTY: %v", t.st.ID, err))
			continue
		}
		x.call.Respond(map[string]any{"written": n})
	}
}

// end closes the terminal once: the master is closed (the shell's session
// gets SIGHUP), waiters are answered, the pool hears it.
func (t *terminal) end(reason string) {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return
	}
	t.ended = true
	now := time.Now().UTC()
	t.st.State, t.st.Reason, t.st.ClosedAt = api.TerminalClosed, reason, &now
	st := t.st
	waiters := t.waiters
	t.waiters = map[api.Call]struct{}{}
	if !t.inClosed {
		t.inClosed = true
		close(t.in)
	}
	t.answerReaders()
	t.room.Broadcast()
	t.mu.Unlock()
	t.f.Close() // ends a Read or Write in progress
	for call := range waiters {
		call.Respond(map[string]any{"terminal": st})
	}
	t.m.bus.Emit(TerminalClosed{TerminalID: st.ID, Pool: st.Pool, Executor: st.Executor, PtyPid: st.PtyPid,
		Reason: reason, BytesOut: st.BytesOut, BytesIn: st.BytesIn, DurationMs: now.Sub(st.OpenedAt).Milliseconds()})
	t.m.sys.Send(t.owner, termGone{id: st.ID})
	time.AfterFunc(termKeep, func() { t.m.dropTerminal(st.ID, t) })
}

// status is the terminal as clients see it.
func (t *terminal) status() api.TerminalStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.st
	st.Attached = len(t.waiters)
	return st
}

// answerReaders answers the pending reads that can be (under mu).
func (t *terminal) answerReaders() {
	for r := range t.readers {
		if res, ok := t.readLocked(r.offset, r.max); ok {
			delete(t.readers, r)
			r.call.Respond(res)
		}
	}
}

// termReadResult is terminal.read's answer: the bytes from offset (as
// text when they are UTF-8, else base64), and eof once the terminal is
// closed and everything it wrote has been read.
type termReadResult struct {
	Offset  int64   `json:"offset"`
	Data    *string `json:"data,omitempty"`
	DataB64 []byte  `json:"data_b64,omitempty"`
	EOF     bool    `json:"eof"`
	Reason  string  `json:"reason,omitempty"`
}

// readLocked returns what a read at offset gets now, or false when it
// must wait. offset is checked by the caller.
func (t *terminal) readLocked(offset int64, max int) (termReadResult, bool) {
	if k := offset - t.start; k > 0 {
		t.buf = t.buf[k:]
		t.start = offset
		if len(t.buf) == 0 {
			t.buf = nil
		}
		t.room.Broadcast()
	}
	if len(t.buf) > 0 {
		b := t.buf[:min(len(t.buf), max)]
		res := termReadResult{Offset: offset}
		if s := string(b); utf8.Valid(b) {
			res.Data = &s
		} else {
			res.DataB64 = []byte(s)
		}
		return res, true
	}
	if t.ended || t.eof {
		if t.ended {
			return termReadResult{Offset: offset, EOF: true, Reason: t.st.Reason}, true
		}
	}
	return termReadResult{}, false
}

// ---- the control-socket methods ----

// terminalOf finds a terminal by id.
func (m *Manager) terminalOf(call api.Call, method string) (*terminal, bool) {
	var p struct {
		ID string `json:"id"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return nil, false
	}
	return m.lookupTerminal(call, method, p.ID)
}

func (m *Manager) lookupTerminal(call api.Call, method, id string) (*terminal, bool) {
	if id == "" {
		call.Fail(api.Errorf(api.CodeInvalidParams, "%s: id is missing", method))
		return nil, false
	}
	m.mu.Lock()
	t := m.terms[id]
	m.mu.Unlock()
	if t == nil {
		call.Fail(api.Errorf(api.CodeNotFound, "no terminal %s", id))
		return nil, false
	}
	return t, true
}

// openTerminalLocked finds a terminal that is still open and returns it
// with its mu held; a closed one fails the call (CodeInvalidState).
func (m *Manager) openTerminalLocked(call api.Call, method, id string) (*terminal, bool) {
	t, ok := m.lookupTerminal(call, method, id)
	if !ok {
		return nil, false
	}
	t.mu.Lock()
	if t.ended {
		call.Fail(api.Errorf(api.CodeInvalidState, "terminal %s is closed (%s)", t.st.ID, t.st.Reason))
		t.mu.Unlock()
		return nil, false
	}
	return t, true
}

func (m *Manager) dropTerminal(id string, t *terminal) {
	m.mu.Lock()
	if m.terms[id] == t {
		delete(m.terms, id)
	}
	m.mu.Unlock()
}

func (m *Manager) terminalOpenMethod(call api.Call) {
	var spec api.TerminalSpec
	if err := call.Decode(&spec); err != nil {
		call.Fail(err)
		return
	}
	bad := func(format string, args ...any) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "terminal.open: "+format, args...))
	}
	switch {
	case spec.Cwd != "" && !filepath.IsAbs(spec.Cwd):
		bad("cwd must be an absolute path, got %q", spec.Cwd)
		return
	case spec.Cols < 0 || spec.Rows < 0 || spec.Cols > 10000 || spec.Rows > 10000:
		bad("cols and rows must be between 1 and 10000, got %dx%d", spec.Cols, spec.Rows)
		return
	case len(spec.Env) > 64:
		bad("env has %d variables, over the limit of 64", len(spec.Env))
		return
	case len(spec.Shell) > 4096:
		bad("shell is %d bytes long", len(spec.Shell))
		return
	}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") || len(k)+len(v) > 32<<10 {
			bad("env: %q is not a valid variable", k)
			return
		}
	}
	if spec.Cols == 0 {
		spec.Cols = 80
	}
	if spec.Rows == 0 {
		spec.Rows = 24
	}
	h, ok := m.livePool(call, spec.Executor, "no terminal opened")
	if !ok {
		return
	}
	m.sys.Send(h.ref, openTerminal{spec: spec, call: call})
}

func (m *Manager) terminalReadMethod(call api.Call) {
	var p struct {
		ID       string `json:"id"`
		Offset   int64  `json:"offset"`
		MaxBytes int    `json:"max_bytes"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	t, ok := m.lookupTerminal(call, "terminal.read", p.ID)
	if !ok {
		return
	}
	if p.MaxBytes <= 0 || p.MaxBytes > termReadMax {
		p.MaxBytes = termReadMax
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.Offset < t.start || p.Offset > t.start+int64(len(t.buf)) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "terminal.read: offset %d is outside the bytes held, %d to %d (each read lets go of the bytes before its offset)",
			p.Offset, t.start, t.start+int64(len(t.buf))))
		return
	}
	if res, ok := t.readLocked(p.Offset, p.MaxBytes); ok {
		call.Respond(res)
		return
	}
	r := &termRead{call: call, offset: p.Offset, max: p.MaxBytes}
	t.readers[r] = struct{}{}
	call.OnClose(func() {
		t.mu.Lock()
		delete(t.readers, r)
		t.mu.Unlock()
	})
}

func (m *Manager) terminalWriteMethod(call api.Call) {
	var p struct {
		ID      string  `json:"id"`
		Data    *string `json:"data"`
		DataB64 []byte  `json:"data_b64"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	data, err := wire.BytesField("data", p.Data, p.DataB64)
	if err != nil {
		call.Fail(api.Errorf(api.CodeInvalidParams, "terminal.write: %v", err))
		return
	}
	if len(data) > termWriteMax {
		call.Fail(api.Errorf(api.CodeInvalidParams, "terminal.write: %d bytes, over the limit of %d per write", len(data), termWriteMax))
		return
	}
	t, ok := m.openTerminalLocked(call, "terminal.write", p.ID)
	if !ok {
		return
	}
	defer t.mu.Unlock()
	select {
	case t.in <- termInput{b: []byte(data), call: call}:
	default:
		call.Fail(api.Errorf(api.CodeQueueFull, "terminal %s: %d writes are waiting for the program on it to read its input: not taken", t.st.ID, termInQueue))
	}
}

func (m *Manager) terminalResizeMethod(call api.Call) {
	var p struct {
		ID   string `json:"id"`
		Cols int    `json:"cols"`
		Rows int    `json:"rows"`
	}
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.Cols < 1 || p.Rows < 1 || p.Cols > 10000 || p.Rows > 10000 {
		call.Fail(api.Errorf(api.CodeInvalidParams, "terminal.resize: cols and rows must be between 1 and 10000, got %dx%d", p.Cols, p.Rows))
		return
	}
	t, ok := m.openTerminalLocked(call, "terminal.resize", p.ID)
	if !ok {
		return
	}
	defer t.mu.Unlock()
	if err := ptyfd.SetSize(t.f, p.Cols, p.Rows); err != nil {
		call.Fail(api.Errorf(api.CodeInternal, "terminal %s: setting the window size: %v", t.st.ID, err))
		return
	}
	t.st.Cols, t.st.Rows = p.Cols, p.Rows
	call.Respond(map[string]any{"terminal": t.st})
}

func (m *Manager) terminalCloseMethod(call api.Call) {
	t, ok := m.terminalOf(call, "terminal.close")
	if !ok {
		return
	}
	t.mu.Lock()
	ended := t.ended
	if !ended {
		t.waiters[call] = struct{}{} // answered by end
	}
	st := t.st
	t.mu.Unlock()
	if ended {
		call.Respond(map[string]any{"terminal": st})
		return
	}
	m.sys.Send(t.ref, termEnd{reason: api.TermClosedByUser})
}

// terminalWaitMethod answers when the terminal closes. The terminal lives
// while someone waits on it: when the last waiter's client goes away, it
// is closed (client_gone).
func (m *Manager) terminalWaitMethod(call api.Call) {
	t, ok := m.terminalOf(call, "terminal.wait")
	if !ok {
		return
	}
	t.mu.Lock()
	if t.ended {
		st := t.st
		t.mu.Unlock()
		call.Respond(map[string]any{"terminal": st})
		return
	}
	t.waiters[call] = struct{}{}
	t.attached = true
	t.mu.Unlock()
	call.OnClose(func() {
		t.mu.Lock()
		delete(t.waiters, call)
		last := len(t.waiters) == 0 && !t.ended
		t.mu.Unlock()
		if last {
			m.sys.Send(t.ref, termEnd{reason: api.TermClientGone})
		}
	})
}

func (m *Manager) terminalListMethod(call api.Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	m.mu.Lock()
	ts := slices.Collect(maps.Values(m.terms))
	m.mu.Unlock()
	out := make([]api.TerminalStatus, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.status())
	}
	slices.SortFunc(out, func(a, b api.TerminalStatus) int { return a.OpenedAt.Compare(b.OpenedAt) })
	call.Respond(map[string]any{"terminals": out})
}
