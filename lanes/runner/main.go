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
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Environment the daemon sets for the runners it spawns.
const (
	EnvLogFormat = "ORCHESTRD_LOG_FORMAT" // json (default) or console
	EnvLogLevel  = "ORCHESTRD_LOG_LEVEL"  // zerolog level, default info
	// EnvLogColor says whether console logs are coloured: "true" or
	// "false"; unset, they are when stderr is a terminal.
	EnvLogColor = "ORCHESTRD_LOG_COLOR"
)

// Main is the `orchestrd runner` subcommand: it parses
// `--lane L --socket P --id ID`, logs to stderr (JSON, or the daemon's
// format from ORCHESTRD_LOG_FORMAT), turns SIGTERM/SIGINT into a clean
// shutdown and returns the process exit code: 0 after a clean shutdown, 1
// when Run fails, 2 for bad flags.
func Main(args []string) int {
	return mainWith(args, os.Stderr, nil)
}

// mainWith is Main with the log/usage output and an optional extra stop
// channel, for tests.
func mainWith(args []string, stderr io.Writer, stop <-chan struct{}) int {
	fs := flag.NewFlagSet("orchestrd runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lane := fs.String("lane", "", "lane this runner serves (no-net, net, heavy, ...)")
	socket := fs.String("socket", "", "unix socket path the daemon listens on for this lane")
	id := fs.String("id", "", "runner id assigned by the daemon (empty for a bring-your-own runner)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: orchestrd runner --lane L --socket P [--id ID]\n\n"+
			"Connects to the daemon's lane socket and runs the jobs it sends until\n"+
			"the daemon sends Shutdown or the process gets SIGTERM/SIGINT.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "orchestrd runner: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *lane == "" || *socket == "" {
		fmt.Fprintln(stderr, "orchestrd runner: --lane and --socket are required")
		fs.Usage()
		return 2
	}

	// The daemon passes its own log format down so its terminal reads as
	// one log; a runner started by hand logs JSON at info.
	var out io.Writer = stderr
	if os.Getenv(EnvLogFormat) == "console" {
		color, err := strconv.ParseBool(os.Getenv(EnvLogColor))
		if err != nil {
			color = isTerminal(stderr)
		}
		out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: !color}
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

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
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
