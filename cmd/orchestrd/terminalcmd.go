package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

const terminalUsage = `orchestrd terminal [--home DIR] [--executor E] [--cwd D] [--shell S]
orchestrd terminal --list [--json]

Opens a shell on a PTY that an executor of pool E spawns (Agor's
spawn_terminal) and attaches this terminal to it: keys go to the shell, its
output comes back byte for byte, and a resize of this window resizes it.
The terminal closes when the shell exits or when this command goes away.
When stdin is not a terminal, what it holds is typed into the shell and
its end is a ^D. Exits 0 when the shell exited, 1 when the terminal closed
for another reason (the executor died, the daemon stopped).`

func cmdTerminal(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("terminal")
	home := homeFlag(fs)
	executor := fs.String("executor", "", "executor pool `E` (default: the only pool, or \"default\")")
	cwd := fs.String("cwd", "", "working `DIR` of the shell (default: the current directory)")
	shell := fs.String("shell", "", "the `SHELL` to start (default: the executor's choice)")
	list := fs.Bool("list", false, "list the open terminals instead")
	asJSON := fs.Bool("json", false, "with --list: print the terminals as JSON")
	c, code, ok := parseNoArgsAndDial(fs, terminalUsage, args, home, stdout, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	if *list {
		return listTerminals(c, *asJSON, stdout, stderr)
	}
	dir, err := workDir(*cwd)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		return exitFailure
	}
	spec := api.TerminalSpec{Executor: *executor, Cwd: dir, Shell: *shell, Env: map[string]string{}}
	if term := os.Getenv("TERM"); term != "" {
		spec.Env["TERM"] = term
	}
	tty := isTTY(os.Stdin) && isTTY(os.Stdout)
	if tty {
		spec.Cols, spec.Rows = windowSize(os.Stdout)
	}
	var opened struct {
		Terminal api.TerminalStatus `json:"terminal"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = c.Call(ctx, "terminal.open", spec, &opened)
	cancel()
	if err != nil {
		return callErr(stderr, err)
	}
	a := &attached{c: c, id: opened.Terminal.ID, stdout: stdout, done: make(chan struct{})}
	return a.run(tty, stderr)
}

// attached is this command attached to one terminal.
type attached struct {
	c      *client.Client
	id     string
	stdout io.Writer
	done   chan struct{} // closed when the terminal has ended

	mu     sync.Mutex
	status api.TerminalStatus
}

func (a *attached) run(tty bool, stderr io.Writer) int {
	// The terminal lives while this waits on it.
	waitErr := make(chan error, 1)
	go func() {
		var r struct {
			Terminal api.TerminalStatus `json:"terminal"`
		}
		err := a.c.Call(context.Background(), "terminal.wait", map[string]any{"id": a.id}, &r)
		if err == nil {
			a.mu.Lock()
			a.status = r.Terminal
			a.mu.Unlock()
		}
		waitErr <- err
	}()
	var restore func()
	if tty {
		var err error
		if restore, err = makeRaw(os.Stdin); err != nil {
			fmt.Fprintf(stderr, "orchestrd: putting the terminal in raw mode: %v\n", err)
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	defer signal.Stop(sigs)
	go a.signals(sigs, tty)
	go a.input(tty)
	readErr := a.output()
	close(a.done)
	if restore != nil {
		restore()
	}
	if readErr != nil {
		return callErr(stderr, readErr)
	}
	select {
	case err := <-waitErr:
		if err != nil {
			return callErr(stderr, err)
		}
	case <-time.After(5 * time.Second):
	}
	a.mu.Lock()
	st := a.status
	a.mu.Unlock()
	if st.Reason != api.TermExited {
		fmt.Fprintf(stderr, "orchestrd: terminal %s closed: %s\n", a.id, st.Reason)
		return exitFailure
	}
	return exitOK
}

// output copies the terminal's output to stdout until its end.
func (a *attached) output() error {
	var off int64
	for {
		var r struct {
			Offset  int64   `json:"offset"`
			Data    *string `json:"data"`
			DataB64 []byte  `json:"data_b64"`
			EOF     bool    `json:"eof"`
			Reason  string  `json:"reason"`
		}
		if err := a.c.Call(context.Background(), "terminal.read", map[string]any{"id": a.id, "offset": off}, &r); err != nil {
			return fmt.Errorf("reading terminal %s: %w", a.id, err)
		}
		b := r.DataB64
		if r.Data != nil {
			b = []byte(*r.Data)
		}
		if len(b) > 0 {
			if _, err := a.stdout.Write(b); err != nil {
				return fmt.Errorf("writing the terminal's output: %w", err)
			}
			off += int64(len(b))
		}
		if r.EOF {
			a.mu.Lock()
			if a.status.Reason == "" {
				a.status.Reason = r.Reason
			}
			a.mu.Unlock()
			return nil
		}
	}
}

// input sends stdin to the terminal, one write at a time.
func (a *attached) input(tty bool) {
	buf := make([]byte, 16<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 && !a.write(buf[:n]) {
			return
		}
		if err != nil {
			if !tty && errors.Is(err, io.EOF) {
				a.write([]byte{4}) // ^D: the end of what was typed
			}
			return
		}
	}
}

func (a *attached) write(b []byte) bool {
	params := map[string]any{"id": a.id}
	if utf8.Valid(b) {
		params["data"] = string(b)
	} else {
		params["data_b64"] = b
	}
	return a.c.Call(context.Background(), "terminal.write", params, nil) == nil
}

func (a *attached) signals(sigs <-chan os.Signal, tty bool) {
	for {
		select {
		case <-a.done:
			return
		case s := <-sigs:
			switch s {
			case syscall.SIGWINCH:
				if tty {
					cols, rows := windowSize(os.Stdout)
					_ = a.c.Call(context.Background(), "terminal.resize", map[string]any{"id": a.id, "cols": cols, "rows": rows}, nil)
				}
			default:
				// Asked to go: the terminal goes with this command.
				_ = a.c.Call(context.Background(), "terminal.close", map[string]any{"id": a.id}, nil)
			}
		}
	}
}

func listTerminals(c *client.Client, asJSON bool, stdout, stderr io.Writer) int {
	var r struct {
		Terminals []api.TerminalStatus `json:"terminals"`
	}
	if err := call(c, "terminal.list", nil, &r); err != nil {
		return callErr(stderr, err)
	}
	if asJSON {
		return printList(stdout, stderr, "terminals", r.Terminals, listCut{})
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEXECUTOR\tPID\tSIZE\tSTATE\tOUT\tIN\tCWD")
	for _, t := range r.Terminals {
		state := t.State
		if t.Reason != "" {
			state += " (" + t.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%dx%d\t%s\t%d\t%d\t%s\n", t.ID, t.Executor, t.PtyPid, t.Cols, t.Rows, state,
			t.BytesOut, t.BytesIn, t.Cwd)
	}
	_ = tw.Flush()
	return exitOK
}

func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func windowSize(f *os.File) (cols, rows int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return 80, 24
	}
	return int(ws.Col), int(ws.Row)
}

// makeRaw puts f's terminal in raw mode (as cfmakeraw) and returns what
// restores it.
func makeRaw(f *os.File) (func(), error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
