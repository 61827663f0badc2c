package main

// Job commands besides run, jobs and cancel: job (one record), wait (its
// end, as run's exit code).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/wire"
)

// exitStillRunning is wait's exit code when its --timeout passes first: the
// job is still running (EX_TEMPFAIL: try again later). Not 124, which is
// the job's own timeout.
const exitStillRunning = 75

// outputTailLines is how many of the kept output's last lines `job` shows.
const outputTailLines = 10

// ---- job ----

const jobUsage = `orchestrd job [--home DIR] [--json] ID

Shows job ID's record, as job.get gives it: its state and exit, lane,
runner, command, times, what it wrote and the last lines of the output
kept. --json prints the record itself.`

func cmdJob(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("job")
	home := homeFlag(fs)
	asJSON := fs.Bool("json", false, "print the record as JSON")
	c, id, code, ok := parseOneIDAndDial(fs, jobUsage, args, home, "want exactly one job ID", stdout, stderr, jobIDs)
	if !ok {
		return code
	}
	defer c.Close()
	var res struct {
		Job api.JobRecord `json:"job"`
	}
	if err := call(c, "job.get", map[string]any{"id": id}, &res); err != nil {
		return callErr(stderr, err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, res.Job)
	}
	printJob(stdout, res.Job, time.Now())
	return exitOK
}

// printJob writes a record as aligned "field  value" lines, then the last
// lines of the output it keeps.
func printJob(w io.Writer, j api.JobRecord, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("job", j.ID)
	state := string(j.State)
	if j.ExitCode != nil {
		state += ", exit " + strconv.Itoa(int(*j.ExitCode))
	}
	if j.Signal != "" {
		state += ", killed by " + j.Signal
	}
	row("state", state)
	switch j.StoppedBy {
	case "sigterm":
		row("stopped by", "SIGTERM (it ended within its kill grace)")
	case "sigkill":
		row("stopped by", "SIGKILL (its kill grace ran out, was 0, or the cancel was forced)")
	case "":
	default:
		row("stopped by", printable(j.StoppedBy))
	}
	row("lane", j.Lane)
	if j.Node != "" {
		row("node", j.Node)
	}
	if j.RunnerID != "" {
		r := j.RunnerID
		if j.RunnerPid > 0 {
			r += " (pid " + strconv.Itoa(j.RunnerPid) + ")"
		}
		row("runner", r)
	}
	row("command", commandLine(j))
	if j.Cwd != "" {
		row("cwd", j.Cwd)
	}
	stamp := func(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05.000") }
	row("created", stamp(j.CreatedAt)+" ("+render.Age(now.Sub(j.CreatedAt))+" ago)")
	if j.DispatchedAt != nil {
		row("dispatched", stamp(*j.DispatchedAt))
	}
	if j.FinishedAt != nil {
		row("finished", stamp(*j.FinishedAt))
	}
	if j.DurationMs > 0 || j.State.Terminal() {
		row("duration", formatDuration(time.Duration(j.DurationMs)*time.Millisecond))
	}
	if j.Usage != nil {
		row("usage", render.UsageLine(j.Usage))
	}
	if j.Error != "" {
		row("error", j.Error)
	}
	row("output", outputSummary(j))
	tw.Flush()
	printOutputTail(w, j)
}

// outputLineBytes bounds a line `job` shows: its last bytes (a megabyte
// with no newline is not a line to print).
const outputLineBytes = 512

// printOutputTail writes the last lines of the output j keeps, escaped for
// a terminal; output that is not text (a NUL, bytes that are not UTF-8) is
// one line saying so and how to get it: escaped, a megabyte of NULs was
// four megabytes on the screen. logs prints all of it, byte for byte.
func printOutputTail(w io.Writer, j api.JobRecord) {
	out := j.Output
	if out == "" {
		return
	}
	rest := strings.TrimSuffix(out, "\n")
	type line struct {
		s   string
		cut bool // only its end is shown
	}
	var lines []line // the last ones, last first
	for len(lines) < outputTailLines {
		i := strings.LastIndexByte(rest, '\n')
		l := line{s: rest[i+1:]}
		if len(l.s) > outputLineBytes {
			l.s, l.cut = l.s[len(l.s)-outputLineBytes:], true
			for k := 0; k < utf8.UTFMax && len(l.s) > 0 && !utf8.RuneStart(l.s[0]); k++ {
				l.s = l.s[1:] // a character cut where the line is
			}
		}
		lines = append(lines, l)
		if i < 0 {
			rest = ""
			break
		}
		rest = rest[:i]
	}
	for _, l := range lines {
		if isBinary(l.s) {
			fmt.Fprintf(w, "\n  (binary output, %d bytes: orchestrd logs %s)\n", len(out), j.ID)
			return
		}
	}
	if rest != "" {
		fmt.Fprintf(w, "\nlast %d lines of output (all of it: orchestrd logs %s):\n", len(lines), j.ID)
	} else {
		fmt.Fprintln(w)
	}
	for i := len(lines) - 1; i >= 0; i-- {
		dots := ""
		if lines[i].cut {
			dots = "..."
		}
		fmt.Fprintf(w, "  %s%s\n", dots, printable(lines[i].s))
	}
}

// isBinary tells output that is not text: a NUL, or bytes that are not
// UTF-8 (a character cut at the end of what was kept aside).
func isBinary(s string) bool {
	if strings.IndexByte(s, 0) >= 0 {
		return true
	}
	if utf8.ValidString(s) {
		return false
	}
	for i := 1; i < utf8.UTFMax && i <= len(s); i++ {
		if utf8.RuneStart(s[len(s)-i]) {
			return !utf8.ValidString(s[:len(s)-i]) || utf8.FullRuneInString(s[len(s)-i:])
		}
	}
	return true
}

// outputSummary says how much the job wrote and what its record keeps.
func outputSummary(j api.JobRecord) string {
	s := outputKept(j)
	if j.Error == api.ErrDaemonLost && j.Output != "" {
		s += "; as the daemon had stored it when it was lost (its last second may be missing)"
	}
	if j.OutputCut {
		s += "; may be incomplete: something that outlived the job held its output open, and what it wrote later was not read"
	}
	return s
}

func outputKept(j api.JobRecord) string {
	wrote := sizeOf(j.OutputBytes)
	switch {
	case !j.State.Terminal():
		return "not in the record until the job ends"
	case j.OutputEvicted:
		return wrote + ", no longer kept (an older daemon dropped it from memory)"
	case j.OutputBytes == 0 && j.Output == "":
		return "none"
	case j.OutputTruncated:
		return wrote + ", the first " + sizeOf(int64(len(j.Output))) + " kept (max_output_bytes)"
	case j.OutputBytes == 0: // a runner that does not count (a Loopr runner)
		return sizeOf(int64(len(j.Output)))
	}
	return wrote
}

// sizeOf is n bytes for a person: "8 B", "1.5 MiB".
func sizeOf(n int64) string {
	if n <= 0 {
		return "0 B"
	}
	return humanBytes(uint64(n))
}

// printable makes a line of a job's output safe for a terminal: control
// characters but tab, and bytes that are not UTF-8, as \xNN.
func printable(s string) string { return escapeControls(s, false) }

// escapeControls writes every C0 control character but tab (and newline,
// when lines), DEL, every C1 control and each byte that is not UTF-8 as
// \xNN, so that text someone else wrote cannot move the cursor, retitle
// the window or colour the screen of whoever reads it. The one way the
// CLI makes such text safe for a terminal: printable for one line,
// terminalSafe for a stream.
func escapeControls(s string, lines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n' && lines:
			b.WriteByte('\n')
		case r == utf8.RuneError && n <= 1, r < ' ' && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0:
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// terminalSafe is w itself unless w is a terminal: there, each write goes
// through escapeControls, newlines and tabs kept. Commands that stream an
// agent's text (prompt, chat, session) write through it, so piped output
// stays byte for byte what the agent wrote. A write is escaped on its own:
// the text written is whole strings decoded from JSON, so valid UTF-8 that
// no write splits.
func terminalSafe(w io.Writer) io.Writer {
	if !isTerminal(w) {
		return w
	}
	return escapingWriter{w}
}

type escapingWriter struct{ w io.Writer }

func (e escapingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, escapeControls(string(p), true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ---- wait ----

const waitUsage = `orchestrd wait [--home DIR] [--timeout D] [--json] ID

Waits until job ID ends and exits as 'orchestrd run' would have: the job's
exit code, 128+n when a signal killed it, 124 when it timed out, 130 when
it was cancelled, 1 when it failed for another reason (saying why on
stderr). With --timeout it gives up when D passes first and exits 75: the
job runs on. Ctrl-C stops waiting, not the job.`

func cmdWait(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("wait")
	home := homeFlag(fs)
	timeout := new(time.Duration)
	fs.Var(timeoutFlag{timeout}, "timeout", "give up after `D` (seconds or a duration: 30, 2m), exit 75 (default: wait for the end)")
	asJSON := fs.Bool("json", false, "print the job's final record as JSON")
	c, id, code, ok := parseOneIDAndDial(fs, waitUsage, args, home, "want exactly one job ID", stdout, stderr, jobIDs)
	if !ok {
		return code
	}
	defer c.Close()
	params := map[string]any{"id": id}
	if *timeout > 0 {
		params["timeout_ms"] = max(1, timeout.Milliseconds())
	}
	var res struct {
		Job api.JobRecord `json:"job"`
	}
	// No deadline of our own: the daemon answers at the end, or at
	// timeout_ms; a daemon that goes away ends the call.
	err := c.Call(context.Background(), "job.wait", params, &res)
	var we *wire.Error
	if errors.As(err, &we) && we.Code == api.CodeInvalidState && *timeout > 0 {
		fmt.Fprintf(stderr, "orchestrd: job %s is still not finished after %s (wait again, or orchestrd cancel %s)\n", id, *timeout, id)
		return exitStillRunning
	}
	if err != nil {
		return callErr(stderr, err)
	}
	if *asJSON {
		if code := printJSON(stdout, stderr, res.Job); code != exitOK {
			return code
		}
	}
	return (&jobFollower{stderr: stderr}).exitCode(res.Job)
}
