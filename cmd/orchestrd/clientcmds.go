package main

// Client commands: run, jobs, cancel, status. Each talks to the daemon over
// its control socket (<home>/daemon.sock) with client.Client and returns
// the process exit code.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/fleet"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/wire"
)

// Exit codes shared by the client commands.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitTimeout   = 124 // like timeout(1)
	exitCancelled = 130 // like a shell after Ctrl-C
	// exitBrokenPipe: run's output went to a pipe nobody reads any more
	// (`run -- make | head`); it cancelled the job, as a shell's SIGPIPE
	// would have ended it, and says so as a shell does (128 + SIGPIPE).
	exitBrokenPipe = 141
)

// callTimeout bounds one-shot calls (jobs, cancel, status).
const callTimeout = 30 * time.Second

// resolveHome picks the daemon's home directory: the --home flag, else
// $ORCHESTRD_HOME, else ~/.orchestrd.
func resolveHome(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if h := os.Getenv("ORCHESTRD_HOME"); h != "" {
		return h
	}
	if d, err := os.UserHomeDir(); err == nil && d != "" {
		return filepath.Join(d, ".orchestrd")
	}
	return ".orchestrd"
}

func socketPath(home string) string { return filepath.Join(home, "daemon.sock") }

// newFlags makes a command's flag set.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseFlags prints errors and help itself
	fs.Usage = func() {}
	if flagSpy != nil {
		flagSpy(fs) // completion learns the command's flags
	}
	return fs
}

// parseFlags parses args. ok is false when the command should exit with
// code: 0 after --help (usage on stdout), 2 on a usage error (one line on
// stderr).
func parseFlags(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	if err == nil {
		return 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs, usage, stdout)
		return exitOK, false
	}
	return usageLine(stderr, fs.Name(), flagError(fs, err)), false
}

func printUsage(fs *flag.FlagSet, usage string, w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", usage)
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if !has {
		return
	}
	fmt.Fprintln(w, "\noptions:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// usageError prints a usage error of fs's command in one line, with where
// its help is, and returns exitUsage.
func usageError(fs *flag.FlagSet, _ string, stderr io.Writer, format string, args ...any) int {
	return usageLine(stderr, fs.Name(), fmt.Sprintf(format, args...))
}

// dial connects to the daemon, printing the one-line diagnosis when there is
// none.
func dial(home string, stderr io.Writer) (*client.Client, bool) {
	c, err := dialHome(home)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		return nil, false
	}
	return c, true
}

// dialHome connects to the daemon at home; when none runs there, the error
// says how to start one.
func dialHome(home string) (*client.Client, error) {
	sock := socketPath(home)
	c, err := client.Dial(sock)
	if errors.Is(err, client.ErrNoDaemon) {
		return nil, fmt.Errorf("no daemon running at %s (start one with: orchestrd serve)", sock)
	}
	return c, err
}

// callErr prints a failed call: the daemon's message for a remote error.
func callErr(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "orchestrd: %s\n", errMessage(err))
	return exitFailure
}

// errMessage is the daemon's message for a remote error, else err's.
func errMessage(err error) string {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Message
	}
	return err.Error()
}

func call(c *client.Client, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return c.Call(ctx, method, params, result)
}

// ---- run ----

const runUsage = `orchestrd run [--home DIR] [--lane L] [--timeout D] [--cwd DIR] [--worktree DIR] [--env K=V]... [--secret NAME]... [--no-stdin] -- CMD [ARGS...]
orchestrd run --peer NAME [--key-file F] [--timeout D] [--cwd DIR] [--env K=V]... -- CMD [ARGS...]

--env values are stored: the job's spec, V included, is kept in the
daemon's state store (state.db) until the job ends. Give a key or a token
with --secret NAME instead: the job gets the secret NAME of the daemon's
secrets.toml in its variable NAME (--secret VAR=NAME: in VAR), looked up
when the job goes to a runner and never stored; only the names are.

With --peer, the job runs on another machine's lanes through its Loopsy
API: NAME is a known peer (orchestrd peers: node id or a prefix of it,
host name, ADDRESS[:PORT]) or a URL. Its output streams here; Ctrl-C
cancels it there. The key presented is --key-file's, else
$ORCHESTRD_PEER_KEY, else this daemon's own (peers list each other's keys
in [http] allowed_keys). stdin is not sent to a peer.

Ctrl-C (or SIGTERM) cancels the job: SIGTERM, its lane's kill grace,
SIGKILL; a second one kills it at once. Output into a pipe whose reader
has gone (run -- make | head) cancels it too, and run exits 141 without a
word, as the command itself would have died of SIGPIPE in a shell.`

type envFlag map[string]string

// secretFlag is --secret NAME (the variable NAME gets the secret NAME) or
// --secret VAR=NAME, repeatable: variable -> secret name.
type secretFlag map[string]string

func (f secretFlag) String() string { return "" }

func (f secretFlag) Set(s string) error {
	k, name, ok := strings.Cut(s, "=")
	if !ok {
		name = k
	}
	if k == "" || name == "" {
		return fmt.Errorf("want NAME or VAR=NAME, got %q", s)
	}
	f[k] = name
	return nil
}

func (e envFlag) String() string { return "" }

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	e[k] = v
	return nil
}

// cmdRun submits a job, streams its output and exits with its exit code.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run")
	home := homeFlag(fs)
	lane := fs.String("lane", "", "`LANE` to run in (default no-net)")
	timeout := new(time.Duration)
	fs.Var(timeoutFlag{timeout}, "timeout", "kill the job after `D`: seconds (30, 1.5) or a duration (500ms, 2m) (default: the lane's)")
	cwd := fs.String("cwd", "", "working `DIR` of the job (default: the current directory)")
	worktree := fs.String("worktree", "", "worktree `DIR` the job's paths must stay in")
	env := envFlag{}
	fs.Var(env, "env", "set `K=V` in the job's environment (repeatable; V is stored in state.db until the job ends)")
	secret := secretFlag{}
	fs.Var(secret, "secret", "give the job secrets.toml's secret `NAME` in $NAME, or VAR=NAME in $VAR (repeatable; never stored)")
	noStdin := fs.Bool("no-stdin", false, "do not forward stdin to the job (it is forwarded when it is not a terminal)")
	peer := fs.String("peer", "", "run on the Loopsy peer `NAME` (node id, host name, ADDRESS[:PORT] or URL)")
	keyFile := fs.String("key-file", "", "with --peer: the `FILE` holding the key to present")
	if code, ok := parseFlags(fs, runUsage, args, stdout, stderr); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usageError(fs, runUsage, stderr, "no command given")
	}
	if *timeout < 0 {
		return usageError(fs, runUsage, stderr, "--timeout must not be negative")
	}
	if *peer != "" {
		if *lane != "" || *worktree != "" || len(secret) > 0 {
			return usageError(fs, runUsage, stderr, "--lane, --worktree and --secret are the local daemon's; a peer runs on its [http] exec_lane")
		}
		if *cwd != "" && !filepath.IsAbs(*cwd) {
			return usageError(fs, runUsage, stderr, "with --peer, --cwd is a path on the peer and must be absolute")
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		return runOnPeer(resolveHome(*home), *peer, *keyFile, argv, *cwd, env, *timeout, stdout, stderr, sig)
	}
	if *keyFile != "" {
		return usageError(fs, runUsage, stderr, "--key-file goes with --peer")
	}
	// --cwd goes as given (made absolute, never cleaned): the runner
	// resolves it and says if it does not exist.
	dir, err := workDir(*cwd)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		return exitFailure
	}
	spec := api.JobSpec{Lane: *lane, Argv: argv, Cwd: dir, TimeoutMs: uint64(timeout.Milliseconds())}
	if *worktree != "" {
		if spec.WorktreeDir, err = absDir(*worktree); err != nil {
			fmt.Fprintf(stderr, "orchestrd: worktree: %v\n", err)
			return exitFailure
		}
	}
	if len(env) > 0 {
		spec.Env = env
	}
	if len(secret) > 0 {
		spec.Secrets = secret
	}
	stdin := forwardedStdin(*noStdin) // streamed to the job while it runs

	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	// A write to a closed pipe fails with EPIPE rather than killing run:
	// it cancels the job first (jobFollower.pipeBroken).
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)

	oneProc()
	r := &jobFollower{c: c, stdout: stdout, stderr: stderr, timeout: *timeout}
	return r.run(spec, stdin, sig)
}

// jobFollower follows one job for cmdRun (stream.go: run, end).
type jobFollower struct {
	c       *client.Client
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration
	jobID   string
	// received counts the job's output bytes written to stdout/stderr;
	// dropped the events the daemon dropped because this client fell
	// behind. finished compares them with the record's output_bytes.
	received int64
	dropped  uint64
	// interrupts counts Ctrl-C (and SIGTERM): the first cancels the job
	// with its kill grace, later ones kill it (force). cancelled gets each
	// job.cancel's answer.
	interrupts int
	cancelled  chan cancelAnswer
	// pipeBroken: writing the output failed with EPIPE; the job is being
	// cancelled and run ends with exitBrokenPipe.
	pipeBroken bool
}

type cancelAnswer struct {
	force, wasRunning bool
	err               error
}

// cancel cancels the job after Ctrl-C: the first time with its kill grace
// (it gets SIGTERM), with force after that (SIGKILL at once). The call runs
// on its own goroutine, the events keep flowing (the job's last output
// included), and run still ends with the job (finished).
func (r *jobFollower) cancel(force bool) {
	id := r.jobID
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var res struct {
			WasRunning bool `json:"was_running"`
		}
		p := map[string]any{"id": id}
		if force {
			p["force"] = true
		}
		err := r.c.Call(ctx, "job.cancel", p, &res)
		r.cancelled <- cancelAnswer{force: force, wasRunning: res.WasRunning, err: err}
	}()
}

// cancelAnswered reports job.cancel's answer; done when run must end
// without the job's end (the cancel failed but for the job having ended).
func (r *jobFollower) cancelAnswered(a cancelAnswer) (code int, done bool) {
	var we *wire.Error
	switch {
	case errors.As(a.err, &we) && we.Code == wire.CodeInvalidState:
		return 0, false // it ended meanwhile: its job.finished says how
	case a.err != nil && we != nil:
		fmt.Fprintf(r.stderr, "orchestrd: cancelling job %s: %s\n", r.jobID, we.Message)
		return exitCancelled, true
	case a.err != nil:
		fmt.Fprintf(r.stderr, "orchestrd: cancelling job %s: %v\n", r.jobID, a.err)
		return exitCancelled, true
	case a.wasRunning && !a.force:
		fmt.Fprintf(r.stderr, "orchestrd: cancelling job %s: SIGTERM, SIGKILL after its kill grace (Ctrl-C again to kill it now)\n", r.jobID)
	}
	return 0, false
}

// runnerFailures describes job errors that mean the job's runner, not the
// job, failed.
var runnerFailures = map[string]string{
	api.ErrRunnerLost:         "runner lost",
	api.ErrRunnerUnresponsive: "runner unresponsive",
	api.ErrRunnerMemory:       "runner exceeded its memory limit",
	api.ErrDaemonShutdown:     "daemon shut down",
}

// limitFailures describes job errors that mean the daemon stopped the job
// for going over a limit of its lane.
var limitFailures = map[string]string{
	api.ErrMemoryExceeded: "its memory went over its lane's max_memory_bytes",
	api.ErrCPUExceeded:    "its CPU time went over its lane's max_cpu_seconds",
}

// finished reports the job's end and returns the exit code for it.
func (r *jobFollower) finished(rec api.JobRecord) int {
	r.completeOutput(rec)
	return r.exitCode(rec)
}

// exitCode says on stderr how the job ended, when not by itself, and
// returns the exit code for it (run's and wait's).
func (r *jobFollower) exitCode(rec api.JobRecord) int {
	id := rec.ID
	if what, ok := runnerFailures[rec.Error]; ok && rec.State != api.StateSucceeded {
		fmt.Fprintf(r.stderr, "orchestrd: job %s failed: %s (%s)\n", id, what, rec.Error)
		return exitFailure
	}
	if what, ok := limitFailures[rec.Error]; ok && rec.State == api.StateFailed {
		by := ""
		if rec.StoppedBy != "" {
			by = ", stopped by " + strings.ToUpper(rec.StoppedBy)
		}
		fmt.Fprintf(r.stderr, "orchestrd: job %s failed: %s (%s%s)\n", id, what, rec.Error, by)
		return exitFailure
	}
	switch rec.State {
	case api.StateSucceeded:
		return exitOK
	case api.StateFailed:
		if rec.ExitCode != nil && *rec.ExitCode > 0 && *rec.ExitCode < 256 {
			return int(*rec.ExitCode)
		}
		if rec.Signal != "" {
			// As a shell reports it: 128 + the signal's number.
			fmt.Fprintf(r.stderr, "orchestrd: job %s was killed by signal %s\n", id, rec.Signal)
			if n := signalNumber(rec.Signal); n > 0 {
				return 128 + n
			}
			return exitFailure
		}
		if rec.Error != "" {
			fmt.Fprintf(r.stderr, "orchestrd: job %s failed: %s\n", id, rec.Error)
		}
		return exitFailure
	case api.StateTimeout:
		d := r.timeout
		if d <= 0 {
			d = (time.Duration(rec.DurationMs) * time.Millisecond).Round(time.Millisecond)
		}
		fmt.Fprintf(r.stderr, "orchestrd: job %s timed out after %s\n", id, d)
		return exitTimeout
	case api.StateCancelled:
		reason := rec.Error
		if r.interrupts > 0 && reason == api.ErrCancelled {
			reason = "interrupted"
		}
		if reason == "" {
			reason = "cancelled"
		}
		fmt.Fprintf(r.stderr, "orchestrd: job %s was cancelled (%s)\n", id, reason)
		return exitCancelled
	case api.StateError:
		if c := rec.ExitCode; c != nil && (*c == 126 || *c == 127) {
			// The command could not be run: the runner's reason, in a
			// shell's words, and a shell's exit code.
			fmt.Fprintf(r.stderr, "orchestrd: %s\n", rec.Error)
			return int(*c)
		}
		msg := strings.TrimSpace(rec.Output)
		if msg == "" {
			msg = rec.Error
		}
		fmt.Fprintf(r.stderr, "orchestrd: job %s error: %s\n", id, msg)
		return exitFailure
	}
	fmt.Fprintf(r.stderr, "orchestrd: job %s ended in state %q\n", id, rec.State)
	return exitFailure
}

// completeOutput makes sure the caller knows when run's output is not all
// the job wrote. A runner that does not stream (a Loopr runner may not)
// leaves its output only in the record: it is written to stdout then.
// Otherwise, if events were dropped or fewer bytes came than the record
// counts, one line on stderr says so.
func (r *jobFollower) completeOutput(rec api.JobRecord) {
	if r.received == 0 && r.dropped == 0 && rec.Output != "" && rec.State != api.StateError {
		io.WriteString(r.stdout, rec.Output)
		r.received = int64(len(rec.Output))
	}
	if r.dropped == 0 && r.received >= rec.OutputBytes {
		return
	}
	var why string
	if r.dropped > 0 {
		why = fmt.Sprintf(": the daemon dropped %s because this client fell behind", api.Count(int(r.dropped), "event"))
	}
	fmt.Fprintf(r.stderr, "orchestrd: output of job %s is incomplete: %d of %d bytes reached this client%s\n",
		rec.ID, r.received, rec.OutputBytes, why)
}

// signalNumber is the number of a signal named as Result.signal names it
// ("SIGSEGV", or "SIG" and a number), or 0.
func signalNumber(name string) int {
	if n := unix.SignalNum(name); n > 0 {
		return int(n)
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "SIG")); err == nil && n > 0 && n < 128 {
		return n
	}
	return 0
}

// ---- jobs ----

// parseNoArgsAndDial is the prologue of a command that takes flags but no
// arguments: parse, refuse extra arguments, connect to the daemon at the
// --home the flags gave. When ok is false the reason has been printed and
// code is the exit code.
func parseNoArgsAndDial(fs *flag.FlagSet, usage string, args []string, home *string, stdout, stderr io.Writer) (c *client.Client, code int, ok bool) {
	if code, ok := parseFlags(fs, usage, args, stdout, stderr); !ok {
		return nil, code, false
	}
	if fs.NArg() > 0 {
		return nil, usageError(fs, usage, stderr, "unexpected argument %q", fs.Arg(0)), false
	}
	c, ok = dial(resolveHome(*home), stderr)
	if !ok {
		return nil, exitFailure, false
	}
	return c, 0, true
}

// parseOneID parses a command that takes flags (anywhere among its
// arguments) and exactly one ID, and returns that argument. When ok is
// false the help or the usage error (want: what it takes) has been printed
// and code is the exit code.
func parseOneID(fs *flag.FlagSet, usage string, args []string, want string, stdout, stderr io.Writer) (arg string, code int, ok bool) {
	pos, code, ok := parseInterspersed(fs, usage, args, stdout, stderr)
	if !ok {
		return "", code, false
	}
	if len(pos) != 1 {
		return "", usageError(fs, usage, stderr, "%s", want), false
	}
	return pos[0], 0, true
}

// parseOneIDAndDial is the prologue of a command that takes flags and
// exactly one ID: parseOneID, then dialResolve at the --home the flags
// gave. When ok is false the reason has been printed and code is the exit
// code; else the caller closes c.
func parseOneIDAndDial(fs *flag.FlagSet, usage string, args []string, home *string, want string, stdout, stderr io.Writer, kinds ...idKind) (c *client.Client, id string, code int, ok bool) {
	arg, code, ok := parseOneID(fs, usage, args, want, stdout, stderr)
	if !ok {
		return nil, "", code, false
	}
	if c, id, ok = dialResolve(*home, arg, stderr, kinds...); !ok {
		return nil, "", exitFailure, false
	}
	return c, id, 0, true
}

// dialResolve connects to the daemon at home and resolves arg, a whole id
// of one of kinds or a unique start of one. When ok is false the reason
// has been printed; else the caller closes c.
func dialResolve(home, arg string, stderr io.Writer, kinds ...idKind) (c *client.Client, id string, ok bool) {
	c, ok = dial(resolveHome(home), stderr)
	if !ok {
		return nil, "", false
	}
	if id, ok = resolveArg(c, stderr, arg, kinds...); !ok {
		c.Close()
		return nil, "", false
	}
	return c, id, true
}

// jobsUsage: jobs lists the daemon's live jobs and those its state store
// keeps, newest first a page at a time (--limit, default 50; 0 lists every
// job); when there are more, a line on stderr gives the command for the
// next page. --json prints {"jobs": [...], "next_cursor": ...} (by default
// every job).
const jobsUsage = "orchestrd jobs [--home DIR] [--state S] [--lane L] [--since S] [--limit N] [--cursor C] [--json]"

// allStates are the job states, in lifecycle order.
var allStates = []api.State{api.StateQueued, api.StateDispatched, api.StateRunning, api.StateSucceeded,
	api.StateFailed, api.StateTimeout, api.StateCancelled, api.StateError}

// cmdJobs lists jobs as a table or JSON.
func cmdJobs(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("jobs")
	home := homeFlag(fs)
	state := fs.String("state", "", "only jobs in `STATE` (queued, dispatched, running, succeeded, failed, timeout, cancelled, error)")
	lane := fs.String("lane", "", "only jobs of `LANE`")
	since := fs.String("since", "", "only jobs created at or after `S`: "+sinceForms)
	limitS := fs.String("limit", "", "at most `N` jobs, newest first (default 50; with --json every job); 0: every job")
	cursor := fs.String("cursor", "", "the page after the one that printed this `C`")
	asJSON := fs.Bool("json", false, "print the job records as JSON")
	if code, ok := parseFlags(fs, jobsUsage, args, stdout, stderr); !ok {
		return code
	}
	if *state != "" && !api.ValidState(*state) {
		names := make([]string, len(allStates))
		for i, s := range allStates {
			names[i] = string(s)
		}
		return usageError(fs, jobsUsage, stderr, "unknown state %q; the states are %s", *state, strings.Join(names, ", "))
	}
	if fs.NArg() > 0 {
		return usageError(fs, jobsUsage, stderr, "unexpected argument %q", fs.Arg(0))
	}
	limit := 0 // --json without --limit: every job
	switch n, err := strconv.Atoi(*limitS); {
	case *limitS == "" && *asJSON:
	case *limitS == "":
		limit = 50
	case err != nil || n < 0 || n > api.MaxListLimit:
		return usageError(fs, jobsUsage, stderr, "--limit must be a number from 0 to %d, got %q", api.MaxListLimit, *limitS)
	default:
		limit = n
	}
	if *cursor != "" && limit == 0 {
		return usageError(fs, jobsUsage, stderr, "--cursor continues a page: give it with the --limit of the page before")
	}
	if *since != "" {
		// Sent as the time it means, which the next page's command keeps.
		t, err := parseSince("--since", *since, time.Now(), time.Local)
		if err != nil {
			return usageError(fs, jobsUsage, stderr, "%v", err)
		}
		*since = t.Format(time.RFC3339Nano)
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	var res struct {
		Jobs       []api.JobRecord `json:"jobs"`
		NextCursor string          `json:"next_cursor"`
	}
	if err := call(c, "job.list", api.Filter{State: *state, Lane: *lane, Since: *since, Limit: limit, Cursor: *cursor}, &res); err != nil {
		return callErr(stderr, err)
	}
	if limit == 0 {
		slices.Reverse(res.Jobs) // every job comes oldest first: newest first, as a page
	}
	if res.NextCursor != "" {
		// The command that prints the next page: this one with its cursor.
		next := slices.Concat([]string{"jobs"}, opt("--home", *home), opt("--state", *state), opt("--lane", *lane),
			opt("--since", *since), []string{"--limit", strconv.Itoa(limit), "--cursor", res.NextCursor}, optIf("--json", *asJSON))
		defer moreHint(stderr, len(res.Jobs), "job", cmdLine(next...))
	}
	return printTable(stdout, stderr, *asJSON, "jobs", res.Jobs, listCut{nextCursor: res.NextCursor}, "no jobs",
		"ID\tLANE\tSTATE\tEXIT\tERROR\tCREATED\tDURATION\tRUNNER\tCOMMAND", func(w io.Writer, j api.JobRecord) {
			exit := "-"
			if j.ExitCode != nil {
				exit = strconv.Itoa(int(*j.ExitCode))
			} else if j.Signal != "" {
				exit = j.Signal
			}
			runner := dash(j.RunnerID)
			if j.Node != "" { // a cluster job: the node it ran on first
				runner = j.Node + ":" + runner
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Lane, j.State, exit, dash(j.Error),
				j.CreatedAt.Local().Format("2006-01-02T15:04:05"), jobDuration(j), runner, commandLine(j))
		})
}

// jobDuration is a job's DURATION: "-" while it has none
// (api.JobRecord.DurationKnown).
func jobDuration(j api.JobRecord) string {
	if !j.DurationKnown() {
		return "-"
	}
	return formatDuration(time.Duration(j.DurationMs) * time.Millisecond)
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\$`*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// commandLine shows a job's command: the shell command, or argv quoted
// where needed.
func commandLine(j api.JobRecord) string {
	if j.Command != "" {
		return j.Command
	}
	parts := make([]string, len(j.Argv))
	for i, a := range j.Argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?[]{}()<>|&;#~") {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// printJSON writes v as indented JSON, "<" as itself (a job's output is
// read by people too).
func printJSON(stdout, stderr io.Writer, v any) int {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		return exitFailure
	}
	stdout.Write(b.Bytes())
	return exitOK
}

// ---- cancel ----

const cancelUsage = "orchestrd cancel [--home DIR] [--force] ID"

// cmdCancel cancels one job.
func cmdCancel(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cancel")
	home := homeFlag(fs)
	force := fs.Bool("force", false, "SIGKILL a running job at once, without its kill grace (so does a second cancel)")
	c, id, code, ok := parseOneIDAndDial(fs, cancelUsage, args, home, "want exactly one job ID", stdout, stderr, jobIDs)
	if !ok {
		return code
	}
	defer c.Close()
	var res struct {
		WasRunning bool `json:"was_running"`
	}
	p := map[string]any{"id": id}
	if *force {
		p["force"] = true
	}
	if err := call(c, "job.cancel", p, &res); err != nil {
		return callErr(stderr, err)
	}
	if res.WasRunning {
		fmt.Fprintf(stdout, "cancelled %s (was running)\n", id)
	} else {
		fmt.Fprintf(stdout, "cancelled %s (was queued)\n", id)
	}
	return exitOK
}

// ---- status ----

const statusUsage = "orchestrd status [--home DIR] [--json]"

// cmdStatus shows the front-ends, the daemon's services in the order they
// start (they stop in reverse), the lanes, their runners and the actor
// tree.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status")
	home := homeFlag(fs)
	asJSON := fs.Bool("json", false, "print front-ends, lanes and tree as JSON")
	c, code, ok := parseNoArgsAndDial(fs, statusUsage, args, home, stdout, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	var ls struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	if err := call(c, "lane.list", nil, &ls); err != nil {
		return callErr(stderr, err)
	}
	var tr struct {
		Tree []actors.TreeNode `json:"tree"`
	}
	if err := call(c, "tree.get", nil, &tr); err != nil {
		return callErr(stderr, err)
	}
	var fe api.FrontEndList
	if err := call(c, "frontend.list", nil, &fe); err != nil {
		return callErr(stderr, err)
	}
	var st api.Status
	if err := call(c, "status", nil, &st); err != nil {
		return callErr(stderr, err)
	}
	// In a fleet, which one and as which node; cluster.nodes is not
	// found when the daemon is in none.
	var cl *fleet.NodesAnswer
	var nodes fleet.NodesAnswer
	if err := call(c, "cluster.nodes", nil, &nodes); err == nil {
		cl = &nodes
	} else if !isNotFound(err) {
		return callErr(stderr, err)
	}
	if *asJSON {
		out := map[string]any{"frontends": fe.FrontEnds, "services": st.Services, "lanes": ls.Lanes, "tree": tr.Tree}
		if st.Node != nil {
			out["node"] = st.Node
		}
		if st.NodeError != "" {
			out["node_error"] = st.NodeError
		}
		if cl != nil {
			out["cluster"] = map[string]any{"cluster": cl.Cluster, "node": cl.Node, "mode": cl.Mode, "url": cl.URL}
		}
		return printJSON(stdout, stderr, out)
	}
	if cl != nil {
		fmt.Fprintln(stdout, clusterLine(*cl))
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, nodeLine(st.Node, st.NodeError))
	fmt.Fprintln(stdout)

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FRONT-END\tADDRESS")
	for _, f := range fe.FrontEnds {
		addr := f.Address
		if f.Off != "" {
			addr = "off: " + f.Off
		}
		fmt.Fprintf(tw, "%s\t%s\n", f.Name, addr)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	printConns(stdout, fe.FrontEnds)
	// The services in the order they start; they stop in reverse.
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSTATE")
	for _, s := range st.Services {
		state := s.State
		if s.Error != "" {
			state += ": " + s.Error
		}
		if s.Off != "" {
			state += ": " + s.Off
		}
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, state)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	// SLOTS as run counts them: in use of the serving runners' slots.
	fmt.Fprintln(tw, "LANE\tNETWORK\tSLOTS IN USE\tQUEUED\tRUNNING\tDEGRADED")
	for _, l := range ls.Lanes {
		busy, total := laneSlots(l)
		fmt.Fprintf(tw, "%s\t%s\t%d of %d\t%d\t%d\t%s\n", l.Name, dash(l.Network), busy, total, l.Queued, l.Running, yesNo(l.Degraded))
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNNER\tLANE\tPID\tSTATE\tROLE\tRESTARTS\tACTIVE\tMEM")
	runners := 0
	for _, l := range ls.Lanes {
		for _, r := range l.Runners {
			runners++
			pid := "-"
			switch {
			case r.Pid > 0:
				pid = strconv.Itoa(r.Pid)
			case r.LastPid > 0:
				pid = "- (was " + strconv.Itoa(r.LastPid) + ")" // no process now
			}
			role := "serving"
			switch {
			case !r.Spawned:
				role = "external"
			case r.Spare:
				role = "spare"
			case r.State != "ready":
				role = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", dash(r.ID), l.Name, pid, r.State, role, r.Restarts, r.ActiveJobs, humanBytes(r.MemoryBytes))
		}
	}
	if runners == 0 {
		fmt.Fprintln(tw, "(no runners)")
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "ACTORS (panic_restarts: restarts of the actor after a panic, not of its process)")
	for _, n := range tr.Tree {
		printTree(stdout, n, 0)
	}
	return exitOK
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printConns lists the connections open to each front-end (at most
// api.MaxListedConns each, the oldest first): its actor, its peer, its
// age and the bytes queued to it.
func printConns(w io.Writer, fes []api.FrontEnd) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONNECTION\tFRONT-END\tPEER\tAGE\tQUEUED")
	n := 0
	for _, f := range fes {
		for _, c := range f.Conns {
			n++
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%d B\n", c.Kind, c.ID, f.Name, connPeer(c),
				(time.Duration(c.AgeMs) * time.Millisecond).Round(time.Second), c.QueuedBytes)
		}
		if f.ConnsLeftOff > 0 {
			fmt.Fprintf(tw, "(%d more)\t%s\t\t\t\n", f.ConnsLeftOff, f.Name)
		}
	}
	if n == 0 {
		fmt.Fprintln(tw, "(none open)")
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// connPeer is a connection's peer: "pid N" or its address.
func connPeer(c api.ConnInfo) string {
	if c.Pid > 0 {
		return "pid " + strconv.Itoa(int(c.Pid))
	}
	return dash(c.Address)
}

// printTree draws one actor and its children, two spaces per level; a
// connection's actor with its peer and queued bytes, and how many
// children were left off.
func printTree(w io.Writer, n actors.TreeNode, depth int) {
	name := n.Kind
	if n.ID != "" {
		name += "/" + n.ID
	}
	extra := ""
	if m, ok := n.Info.(map[string]any); ok {
		var c api.ConnInfo
		if b, err := json.Marshal(m); err == nil && json.Unmarshal(b, &c) == nil && c.Kind != "" {
			extra = fmt.Sprintf("  peer=%s queued=%dB", strings.ReplaceAll(connPeer(c), " ", ":"), c.QueuedBytes)
		}
	}
	fmt.Fprintf(w, "%s%s  %s  panic_restarts=%d%s\n", strings.Repeat("  ", depth), name, n.State, n.Restarts, extra)
	for _, c := range n.Children {
		printTree(w, c, depth+1)
	}
	if n.LeftOff > 0 {
		fmt.Fprintf(w, "%s(%d more)\n", strings.Repeat("  ", depth+1), n.LeftOff)
	}
}

func humanBytes(n uint64) string {
	if n == 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, i := float64(n), -1
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + []string{"KiB", "MiB", "GiB", "TiB"}[i]
}

// homeFlag adds the client commands' --home flag to fs.
func homeFlag(fs *flag.FlagSet) *string {
	return fs.String("home", "", "daemon home `DIR` (default $ORCHESTRD_HOME or ~/.orchestrd)")
}

// nodeLine is status's line of the node's figures.
func nodeLine(n *api.NodeFigures, errText string) string {
	if n == nil {
		return "node: figures unavailable: " + errText
	}
	return fmt.Sprintf("node: %d CPUs, memory %s available of %s, load %.2f %.2f %.2f, home %s free of %s",
		n.CPUs, humanBytes(n.MemAvailBytes), humanBytes(n.MemTotalBytes), n.Load1, n.Load5, n.Load15,
		humanBytes(n.HomeFreeBytes), humanBytes(n.HomeTotalBytes))
}
