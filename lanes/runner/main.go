package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
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
	return mainWith(args, os.Stdout, os.Stderr, nil)
}

const usage = `usage: orchestrd runner --lane L --socket PATH [--id ID]

Connects to the daemon's lane socket and runs the jobs it sends until
the daemon sends Shutdown or the process gets SIGTERM/SIGINT.
`

// mainWith is Main with the help, log and usage-error output and an
// optional extra stop channel, for tests.
func mainWith(args []string, stdout, stderr io.Writer, stop <-chan struct{}) int {
	fs := flag.NewFlagSet("orchestrd runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lane := fs.String("lane", "", "`LANE` this runner serves (no-net, net, heavy, ...)")
	socket := fs.String("socket", "", "unix socket `PATH` the daemon listens on for this lane")
	id := fs.String("id", "", "runner `ID` assigned by the daemon (empty for a bring-your-own runner)")
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
	if *lane == "" || *socket == "" {
		fmt.Fprintln(stderr, "orchestrd runner: --lane and --socket are required")
		printUsage(stderr)
		return 2
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
	if stop != nil {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}

	err := Run(ctx, Options{Lane: *lane, Socket: *socket, ID: *id, Version: version(), Logger: log})
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
