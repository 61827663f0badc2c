package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Environment the daemon sets for the runners it spawns.
const (
	EnvLogFormat = "ORCHESTRD_LOG_FORMAT" // json (default) or console
	EnvLogLevel  = "ORCHESTRD_LOG_LEVEL"  // zerolog level, default info
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
		out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}
	}
	level := zerolog.InfoLevel
	if l, err := zerolog.ParseLevel(os.Getenv(EnvLogLevel)); err == nil && os.Getenv(EnvLogLevel) != "" {
		level = l
	}
	log := zerolog.New(out).Level(level).With().Timestamp().
		Str("component", "runner").Str("lane", *lane).Str("runner_id", *id).Int("pid", os.Getpid()).
		Logger()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	// A second signal, once the first one started the shutdown, kills at once.
	context.AfterFunc(ctx, cancel)
	// SIGHUP is what a spawned runner gets when the daemon dies (its
	// parent-death signal), once per daemon thread that exits: every one
	// after the first must be absorbed, or the runner would die before it
	// has killed its jobs. It stops the runner like SIGTERM, just once.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer func() { signal.Stop(hup); close(hup) }()
	go func() {
		for range hup {
			cancel()
		}
	}()
	if stop != nil {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}

	err := Run(ctx, Options{Lane: *lane, Socket: *socket, ID: *id, Version: version(), Logger: log,
		Conn: conn, Token: token, Sandbox: Sandbox{Hide: hide, Cgroup: *cgroup, Subreaper: standalone}})
	if err != nil {
		log.Error().Err(err).Msg("runner failed")
		return 1
	}
	log.Info().Msg("runner stopped")
	return 0
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
