package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/platform/proc"
)

// Environment the daemon sets for the runners it spawns.
const (
	EnvLogFormat = "ORCHESTRD_LOG_FORMAT" // json (default) or console
	EnvLogLevel  = "ORCHESTRD_LOG_LEVEL"  // zerolog level, default info (serve: the daemon's level)
	// EnvLogColor says whether console logs are coloured: "true" or
	// "false"; unset, they are when stderr is a terminal.
	EnvLogColor = "ORCHESTRD_LOG_COLOR"
	// EnvCPUProfile, when set (serve --cpuprofile sets it), is a path
	// prefix: the runner writes a CPU profile of its run to PREFIX-ID.pprof
	// when it stops. Never passed on to a job.
	EnvCPUProfile = "ORCHESTRD_RUNNER_CPUPROFILE"
)

// Main is the `orchestrd runner` subcommand: it parses
// `--lane L --socket P --id ID`, logs to stderr (JSON, or the daemon's
// format from ORCHESTRD_LOG_FORMAT), turns SIGTERM/SIGINT into a clean
// shutdown and returns the process exit code: 0 after a clean shutdown, 1
// when Run fails, 2 for bad flags.
func Main(args []string) int {
	return mainWith(args, os.Stdout, os.Stderr, nil, true)
}

const usage = `usage: orchestrd runner --lane L --socket PATH [--token-file F] [--id ID]

Connects to the daemon's lane socket and runs the jobs it sends until
the daemon sends Shutdown or the process gets SIGTERM/SIGINT. A
bring-your-own runner needs the lane's join token (orchestrd lane token L).
`

// mainWith is Main with the help, log and usage-error output and an
// optional extra stop channel, for tests. standalone says the process is a
// runner and nothing else, so it may be the subreaper of its jobs (a test
// process is not).
func mainWith(args []string, stdout, stderr io.Writer, stop <-chan struct{}, standalone bool) int {
	fs := flag.NewFlagSet("orchestrd runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lane := fs.String("lane", "", "`LANE` this runner serves (no-net, net, heavy, ...)")
	socket := fs.String("socket", "", "unix socket `PATH` the daemon listens on for this lane")
	id := fs.String("id", "", "runner `ID` assigned by the daemon (empty for a bring-your-own runner)")
	tokenFile := fs.String("token-file", "", "`FILE` holding the lane's join token (orchestrd lane token L); default $"+EnvJoinToken)
	connFD := fs.Int("fd", -1, "inherited descriptor `N` of a connected socket to the daemon (set by the daemon when it spawns a runner)")
	var hide stringsFlag
	fs.Var(&hide, "hide", "`PATH` to hide from jobs in the runner's own mount namespace (set by the daemon; repeatable)")
	cgroup := fs.String("cgroup", "", "cgroup v2 `DIR` the runner was started in; each job gets a cgroup below it (set by the daemon)")
	noSandbox := fs.Bool("no-sandbox", false, "a bring-your-own runner: run jobs without the sandbox (its jobs can then see the lane socket's directory and the token file)")
	stopFD := fs.Int("stop-fd", -1, "inherited descriptor `N`: a byte then its end of file stops the runner cleanly, its end alone ends it at once (set when a bring-your-own runner sandboxes itself)")
	// The same format as every orchestrd command's --help.
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usage+"\noptions:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "orchestrd runner: %v\n", err)
		printUsage(stderr)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "orchestrd runner: unexpected argument %q\n", fs.Arg(0))
		printUsage(stderr)
		return 2
	}
	if *lane == "" || (*socket == "") == (*connFD < 0) {
		fmt.Fprintln(stderr, "orchestrd runner: --lane and --socket are required")
		printUsage(stderr)
		return 2
	}
	// The token never reaches a job: read it, then drop it from the
	// environment the jobs inherit.
	token := os.Getenv(EnvJoinToken)
	os.Unsetenv(EnvJoinToken)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd runner: reading the join token: %v\n", err)
			return 2
		}
		token = strings.TrimSpace(string(b))
	}
	if *socket != "" && standalone && !*noSandbox {
		// A bring-your-own runner sandboxes its jobs as a spawned one does:
		// it connects, then runs itself again in namespaces of its own.
		return sandboxed(*lane, *socket, *id, *tokenFile, token, stderr)
	}
	if prefix := os.Getenv(EnvCPUProfile); prefix != "" {
		os.Unsetenv(EnvCPUProfile)
		name := *id // unique among a daemon's runners; the pid may be 1 in each one's namespace
		if name == "" {
			name = strconv.Itoa(os.Getpid())
		}
		if stop := cpuProfile(prefix+"-"+name+".pprof", stderr); stop != nil {
			defer stop()
		}
	}
	var conn *net.UnixConn
	if *connFD >= 0 {
		f := os.NewFile(uintptr(*connFD), "daemon-socket")
		c, err := net.FileConn(f)
		f.Close()
		uc, ok := c.(*net.UnixConn)
		if err != nil || !ok {
			fmt.Fprintf(stderr, "orchestrd runner: --fd %d is not a connected unix socket (%v)\n", *connFD, err)
			return 2
		}
		conn = uc
	}

	// The daemon passes its own log format down so its terminal reads as
	// one log; a runner started by hand logs JSON at info.
	var out io.Writer = stderr
	if os.Getenv(EnvLogFormat) == "console" {
		color, err := strconv.ParseBool(os.Getenv(EnvLogColor))
		if err != nil {
			color = IsTerminal(stderr)
		}
		out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: !color}
	}
	level := zerolog.InfoLevel
	if l, err := zerolog.ParseLevel(os.Getenv(EnvLogLevel)); err == nil && os.Getenv(EnvLogLevel) != "" {
		level = l
	}
	log := zerolog.New(out).Level(level).With().Timestamp().
		Str("component", "runner").Str("lane", *lane).Str("runner_id", *id).Int("pid", hostPid()).
		Logger()

	var ctx context.Context
	var cancel context.CancelFunc
	if os.Getpid() == 1 {
		// The init of its own pid namespace: stopped by the daemon's
		// Shutdown frame, its socket's end, or --stop-fd; signals come
		// only from its jobs, and are absorbed.
		ctx, cancel = context.WithCancel(context.Background())
		AbsorbInitSignals()
	} else {
		ctx, cancel = signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		// A second signal, once the first one started the shutdown, kills
		// at once.
		context.AfterFunc(ctx, cancel)
		// SIGHUP is what a runner without the sandbox gets when the daemon
		// dies (its parent-death signal), once per daemon thread that
		// exits: every one after the first must be absorbed, or the runner
		// would die before it has killed its jobs. It stops the runner like
		// SIGTERM, just once.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer func() { signal.Stop(hup); close(hup) }()
		go func() {
			for range hup {
				cancel()
			}
		}()
	}
	defer cancel()
	if stop != nil {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if *stopFD >= 0 {
		f := os.NewFile(uintptr(*stopFD), "stop")
		go func() {
			// The wrapper writes a byte and closes its end to stop the
			// runner cleanly. Its end closed with nothing written is its
			// death: the kernel closes a dying process's descriptors before
			// it sends the parent-death signal, so the runner could see
			// this first and stop cleanly, reporting its jobs cancelled
			// where they were lost. It dies at once instead, as that
			// signal would have it, its jobs with it (it is the init of
			// their pid namespace): the daemon hears its socket close.
			if n, _ := io.Copy(io.Discard, f); n == 0 {
				log.Error().Msg("runner: its sandboxing wrapper died; dying with it")
				os.Exit(1)
			}
			cancel()
		}()
	}

	// The daemon spawns a runner with --fd alone (a bring-your-own runner
	// that sandboxes itself adds --stop-fd): its routine lines are then
	// debug, the event log having its comings and goings; a runner
	// started by hand says them at info.
	routine := zerolog.InfoLevel
	if *connFD >= 0 && *stopFD < 0 {
		routine = zerolog.DebugLevel
	}
	err := Run(ctx, Options{Lane: *lane, Socket: *socket, ID: *id, Version: version(), Logger: log,
		Conn: conn, Token: token, Sandbox: Sandbox{Hide: hide, Cgroup: *cgroup, Subreaper: standalone}, Routine: routine})
	if err != nil {
		log.Error().Err(err).Msg("runner failed")
		return 1
	}
	log.WithLevel(routine).Msg("runner stopped")
	return 0
}

// IsTerminal reports whether w is a terminal (logs are coloured only then).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// version is the main module's version from the build info.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// hostPid is this process's pid as the host knows it: a sandboxed runner
// is pid 1 of its own pid namespace, but /proc, not yet replaced by the
// namespace's own when this runs, still names it by the daemon's pid.
func hostPid() int {
	if p := os.Getpid(); p != 1 {
		return p
	}
	if l, err := os.Readlink("/proc/self"); err == nil {
		if p, err := strconv.Atoi(l); err == nil {
			return p
		}
	}
	return 1
}

// sandboxed is a bring-your-own runner started by hand: it connects to the
// lane socket, then starts itself again as the runner proper (pid 1 of its
// own pid namespace, in its own mount namespace, hiding the socket's
// directory and the token file from its jobs; without root inside a user
// namespace), handing it the connection (fd 3) and the token, and waits for
// it. SIGTERM or SIGINT stops it cleanly (through fd 4, which the runner
// reads to its end after the byte this process writes there); if this
// process dies, so does the runner, and every job with it (fd 4 closed
// with nothing written, then the parent-death signal).
func sandboxed(lane, socket, id, tokenFile, token string, stderr io.Writer) int {
	c, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd runner: connecting to %s: %v\n", socket, err)
		return 1
	}
	cf, err := c.(*net.UnixConn).File()
	c.Close()
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd runner: %v\n", err)
		return 1
	}
	stopR, stopW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd runner: %v\n", err)
		return 1
	}
	args := []string{"runner", "--lane", lane, "--id", id, "--fd", "3", "--stop-fd", "4", "--hide", filepath.Dir(socket)}
	if tokenFile != "" {
		args = append(args, "--hide", tokenFile)
	}
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, stderr
	cmd.ExtraFiles = []*os.File{cf, stopR}
	cmd.Env = append(os.Environ(), EnvJoinToken+"="+token)
	cmd.SysProcAttr = proc.SandboxAttr(proc.Isolation{Sandbox: true})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	err = cmd.Start()
	cf.Close()
	stopR.Close()
	if err != nil {
		stopW.Close()
		fmt.Fprintf(stderr, "orchestrd runner: starting the sandboxed runner: %v\n", proc.ExplainSpawnError(err))
		fmt.Fprintln(stderr, "orchestrd runner: (--no-sandbox runs it without the sandbox)")
		return 1
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			_, _ = stopW.Write([]byte{'s'}) // a clean stop, not this process's death
			stopW.Close()
		case <-done:
		}
	}()
	err = cmd.Wait()
	close(done)
	stopW.Close()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd runner: %v\n", err)
		return 1
	}
	return 0
}

// cpuProfile profiles the runner's CPU into a new file at path until the
// returned stop is called; nil (and a line on stderr) when it cannot.
func cpuProfile(path string, stderr io.Writer) (stop func()) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err == nil {
		err = pprof.StartCPUProfile(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd runner: no CPU profile: %v\n", err)
		return nil
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
