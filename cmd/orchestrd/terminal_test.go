package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// termReader reads a terminal's output by offset through the control
// socket, as `orchestrd terminal` does.
type termReader struct {
	d   *testDaemon
	c   *client.Client
	id  string
	off int64
	out []byte
	eof string // the reason, once read to the end
}

func (r *termReader) readOnce(within time.Duration) error {
	var res struct {
		Data    *string `json:"data"`
		DataB64 []byte  `json:"data_b64"`
		EOF     bool    `json:"eof"`
		Reason  string  `json:"reason"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := r.c.Call(ctx, "terminal.read", map[string]any{"id": r.id, "offset": r.off}, &res); err != nil {
		return err
	}
	b := res.DataB64
	if res.Data != nil {
		b = []byte(*res.Data)
	}
	r.out = append(r.out, b...)
	r.off += int64(len(b))
	if res.EOF {
		r.eof = res.Reason
	}
	return nil
}

// until reads until cond holds of the output so far, or the end.
func (r *termReader) until(what string, cond func([]byte) bool) {
	r.d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(r.out) {
		if r.eof != "" {
			r.d.t.Fatalf("terminal %s ended (%s) before %s; output:\n%q", r.id, r.eof, what, r.out)
		}
		left := time.Until(deadline)
		if left <= 0 {
			r.d.t.Fatalf("no %s within 30s; output:\n%q", what, r.out)
		}
		if err := r.readOnce(left); err != nil && !strings.Contains(err.Error(), "deadline") {
			r.d.t.Fatalf("terminal.read: %v", err)
		}
	}
}

func (r *termReader) toEnd() {
	r.d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.eof == "" {
		if time.Now().After(deadline) {
			r.d.t.Fatalf("terminal %s not ended within 30s; output:\n%q", r.id, r.out)
		}
		if err := r.readOnce(30 * time.Second); err != nil {
			r.d.t.Fatalf("terminal.read: %v", err)
		}
	}
}

func (r *termReader) write(s string) {
	r.d.t.Helper()
	params := map[string]any{"id": r.id, "data": s}
	ctx, cancel := context.WithTimeout(context.Background(), testCallTimeout)
	defer cancel()
	if err := r.c.Call(ctx, "terminal.write", params, nil); err != nil {
		r.d.t.Fatalf("terminal.write: %v", err)
	}
}

// openTerminal opens a terminal whose shell carries mark in its
// environment, and waits on it from a client of its own (closing that
// client is the attached user going away).
func (d *testDaemon) openTerminal(pool, mark string, cols, rows int) (api.TerminalStatus, *client.Client, *termReader) {
	d.t.Helper()
	var r struct {
		Terminal api.TerminalStatus `json:"terminal"`
	}
	// The shell's directory: not the daemon's home, which the sandbox hides.
	d.mustCall("terminal.open", map[string]any{"executor": pool, "cwd": shortTemp(d.t), "shell": "/bin/sh",
		"cols": cols, "rows": rows, "env": map[string]string{"ORCH_TERM_MARK": mark, "PS1": "$ "}}, &r)
	waiter := d.client()
	go func() {
		_ = waiter.Call(context.Background(), "terminal.wait", map[string]any{"id": r.Terminal.ID}, nil)
	}()
	eventually(d.t, 20*time.Second, "a client attached to "+r.Terminal.ID, func() bool {
		var list struct {
			Terminals []api.TerminalStatus `json:"terminals"`
		}
		d.mustCall("terminal.list", nil, &list)
		for _, x := range list.Terminals {
			if x.ID == r.Terminal.ID {
				return x.Attached == 1
			}
		}
		return false
	})
	return r.Terminal, waiter, &termReader{d: d, c: d.client(), id: r.Terminal.ID}
}

// marked lists the live processes whose environment holds
// ORCH_TERM_MARK=mark (the terminal's shell and its children).
func marked(mark string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(b, []byte("ORCH_TERM_MARK="+mark+"\x00")) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitClosedWithExecutor waits, once the executor of terminal id was
// killed, until the terminal closed, r read to its end and no process has
// mark. Sandboxed, the shell dies with the executor's pid namespace and
// the PTY may report its end first (exited); unsandboxed the daemon closes
// it when the executor's exit is seen (executor_exited).
func (d *testDaemon) waitClosedWithExecutor(id string, r *termReader, mark string) {
	d.t.Helper()
	d.waitEvent("terminal.closed", func(e map[string]any) bool {
		return e["terminal_id"] == id && (e["reason"] == api.TermExecutorExited || e["reason"] == api.TermExited)
	})
	r.toEnd()
	waitNoMarked(d.t, mark)
}

func waitNoMarked(t *testing.T, mark string) {
	t.Helper()
	eventuallyOr(t, 20*time.Second, "the terminal's shell gone", func() bool { return len(marked(mark)) == 0 },
		func() string { return fmt.Sprint("still alive: ", marked(mark)) })
}

// spawn_terminal end to end: the executor passes the PTY with SCM_RIGHTS,
// the daemon owns it; output comes back byte for byte, a resize reaches
// the shell, and the terminal closes (its shell gone) when its shell
// exits, when its client goes away, and when its executor is killed.
func TestExecutorTerminal(t *testing.T) {
	t.Parallel()
	te := testExecutor(t)
	cfg := execConfig(t, "") + fmt.Sprintf(`
[executors.refuse]
command = [%q, "--terminal", "refuse"]
[executors.nofd]
command = [%q, "--terminal", "nofd"]
[executors.notpty]
command = [%q, "--terminal", "notpty"]
[executors.cli]
command = [%q, "executor", "--", "cat"]
`, te, te, te, binary)
	d := startDaemon(t, cfg)

	// orchestrd's own executor spawns terminals too.
	out, err := exec.Command("sh", "-c", `printf 'echo cli-$((2+3))\nexit\n' | "$0" terminal --home "$1" --executor cli --shell /bin/sh`,
		binary, d.home).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cli-5") {
		t.Fatalf("orchestrd terminal on orchestrd executor: %v\n%s", err, out)
	}

	// The CLI, fed by a pipe: what it reads is typed, its end is ^D.
	cmd := exec.Command(binary, "terminal", "--home", d.home, "--executor", "scripted", "--shell", "/bin/sh")
	cmd.Stdin = strings.NewReader("echo out-$((6*7))\nexit 3\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("orchestrd terminal: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "out-42") {
		t.Fatalf("orchestrd terminal's output:\n%q", stdout.String())
	}
	closed := d.waitEvent("terminal.closed", nil)
	if closed["reason"] != api.TermExited || closed["bytes_out"].(float64) < 6 {
		t.Fatalf("terminal.closed: %v", closed)
	}

	// Through the control socket: size, resize, bytes that are not text.
	mark := "m" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st, waiter, r := d.openTerminal("scripted", mark, 100, 30)
	if st.State != api.TerminalOpen || st.Cols != 100 || st.Rows != 30 || st.PtyPid <= 0 {
		t.Fatalf("terminal.open: %+v", st)
	}
	d.waitEvent("terminal.opened", func(e map[string]any) bool { return e["terminal_id"] == st.ID })
	r.write("stty size\n")
	r.until("the size 30 100", func(b []byte) bool { return bytes.Contains(b, []byte("30 100")) })
	d.mustCall("terminal.resize", map[string]any{"id": st.ID, "cols": 132, "rows": 43}, nil)
	r.write("stty size\n")
	r.until("the size 43 132", func(b []byte) bool { return bytes.Contains(b, []byte("43 132")) })
	r.write("stty raw -echo; printf '\\377\\376\\001\\033z-end'; stty sane\n")
	r.until("the raw bytes", func(b []byte) bool { return bytes.Contains(b, []byte("\xff\xfe\x01\x1bz-end")) })
	// A flood the client reads slowly: every byte arrives (the shell is
	// held back, nothing is dropped).
	const n = 3 << 20
	r.write(fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; echo; echo flood-done\n", n))
	r.until("the flood's end", func(b []byte) bool { return bytes.Contains(b, []byte("\nflood-done")) })
	if got := bytes.Count(r.out, []byte("x")); got < n {
		t.Fatalf("flood: %d x of %d", got, n)
	}
	if len(marked(mark)) == 0 {
		t.Fatalf("no process carries the terminal's mark: the test cannot see its shell")
	}

	// Bad input: refused with a message, the terminal unharmed.
	for _, bad := range []struct {
		method string
		params map[string]any
		want   string
	}{
		{"terminal.open", map[string]any{"executor": "scripted", "cwd": "relative/dir"}, "absolute"},
		{"terminal.open", map[string]any{"executor": "scripted", "cwd": "/nonexistent-orchestrd-dir"}, "working directory"},
		{"terminal.open", map[string]any{"executor": "nope"}, "no executor pool"},
		{"terminal.read", map[string]any{"id": "term-nope"}, "no terminal"},
		{"terminal.read", map[string]any{"id": st.ID, "offset": 0}, "outside the bytes held"},
		{"terminal.resize", map[string]any{"id": st.ID, "cols": 0, "rows": 5}, "between 1 and 10000"},
		{"terminal.write", map[string]any{"id": st.ID, "data": "x", "data_b64": "eA=="}, "want one"},
		{"terminal.open", map[string]any{"executor": "refuse"}, "refused spawn_terminal"},
		{"terminal.open", map[string]any{"executor": "nofd"}, "without passing the PTY"},
		{"terminal.open", map[string]any{"executor": "notpty"}, "not a PTY master"},
	} {
		err := d.call(bad.method, bad.params, nil)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s %v: got %v, want an error saying %q", bad.method, bad.params, err, bad.want)
		}
	}
	d.waitEvent("terminal.open_failed", func(e map[string]any) bool { return e["pool"] == "notpty" })
	// Quotes split each marker in the typed line, which the terminal
	// echoes: only the shell's output holds it whole.
	r.write("echo still''-here\n")
	r.until("the terminal still working", func(b []byte) bool { return bytes.Contains(b, []byte("still-here")) })

	// Its client goes away: the terminal closes, the shell is hung up.
	waiter.Close()
	d.waitEvent("terminal.closed", func(e map[string]any) bool {
		return e["terminal_id"] == st.ID && e["reason"] == api.TermClientGone
	})
	r.toEnd()
	waitNoMarked(t, mark)
	if err := d.call("terminal.write", map[string]any{"id": st.ID, "data": "x"}, nil); err == nil || !strings.Contains(err.Error(), "closed (client_gone)") {
		t.Fatalf("a write to the closed terminal: %v", err)
	}

	// Its executor is killed: the terminal closes, the shell goes too.
	mark2 := mark + "b"
	st2, _, r2 := d.openTerminal("scripted", mark2, 80, 24)
	r2.write("echo re''ady\n")
	r2.until("the shell ready", func(b []byte) bool { return bytes.Contains(b, []byte("ready")) })
	var pools struct {
		Pools []api.PoolStatus `json:"pools"`
	}
	d.mustCall("executor.list", nil, &pools)
	pid := 0
	for _, p := range pools.Pools {
		for _, e := range p.Executors {
			if e.ID == st2.Executor {
				pid = e.Pid
			}
		}
	}
	if pid == 0 {
		t.Fatalf("executor %s not in executor.list: %+v", st2.Executor, pools)
	}
	d.kill("executor", pid)
	d.waitClosedWithExecutor(st2.ID, r2, mark2)

	var list struct {
		Terminals []api.TerminalStatus `json:"terminals"`
	}
	d.mustCall("terminal.list", nil, &list)
	for _, x := range list.Terminals {
		if x.State != api.TerminalClosed {
			t.Errorf("terminal still %s: %+v", x.State, x)
		}
	}
	out, err = exec.Command(binary, "terminal", "--home", d.home, "--list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), st2.ID) || !strings.Contains(string(out), "closed (") {
		t.Fatalf("orchestrd terminal --list: %v\n%s", err, out)
	}
}

// Without the sandbox the shell is a session of its own, a process of the
// host: pty_pid is its pid. When its executor dies, the daemon's reaper
// kills it as an orphan, or the daemon hangs it up by closing the PTY,
// whichever comes first; either way the terminal closes and the shell is
// gone.
func TestExecutorTerminalUnsandboxed(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[daemon]\nsandbox = false\n\n"+execConfig(t, ""))
	mark := "u" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st, _, r := d.openTerminal("scripted", mark, 80, 24)
	r.write("echo re''ady\n")
	r.until("the shell ready", func(b []byte) bool { return bytes.Contains(b, []byte("ready")) })
	if got := marked(mark); len(got) != 1 || got[0] != st.PtyPid {
		t.Fatalf("processes with the mark: %v, want the shell, pty_pid %d", got, st.PtyPid)
	}
	var pools struct {
		Pools []api.PoolStatus `json:"pools"`
	}
	d.mustCall("executor.list", nil, &pools)
	pid := pools.Pools[0].Executors[0].Pid
	d.kill("executor", pid)
	d.waitClosedWithExecutor(st.ID, r, mark)
}
