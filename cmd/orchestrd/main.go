// Command orchestrd is the daemon and its command-line client in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/supervisor/daemon"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// version is set with -ldflags "-X main.version=..." in releases.
var version = "0.1.0-dev"

const usage = `orchestrd: a supervisor for AI-agent processes

Usage:
  orchestrd serve [--home DIR] [--config FILE] [--log-format json|console]
  orchestrd run [--lane L] [--timeout D] [--cwd DIR] -- CMD ARGS...
  orchestrd jobs [--state S] [--lane L] [--json]
  orchestrd cancel ID
  orchestrd status [--json]
  orchestrd events [--follow] [--kind K]... [--lane L] [--job ID] [--since 5m] [--json]
  orchestrd runner --lane L --socket PATH [--id ID]   (spawned by the daemon)
  orchestrd version

Every command takes --home DIR (default $ORCHESTRD_HOME, else ~/.orchestrd)
and --help.
`

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return cmdServe(rest, stdout, stderr)
	case "runner":
		return runner.Main(rest)
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "jobs":
		return cmdJobs(rest, stdout, stderr)
	case "cancel":
		return cmdCancel(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "events":
		return eventlog.CLI(rest, resolveHome(""), stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "orchestrd", version)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "orchestrd: unknown command %q\n\n%s", cmd, usage)
	return 2
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orchestrd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	home := fs.String("home", "", "daemon home: sockets, config.toml, events.ndjson (default $ORCHESTRD_HOME or ~/.orchestrd)")
	cfgPath := fs.String("config", "", "TOML config (default HOME/config.toml if it exists, else the embedded defaults)")
	logFormat := fs.String("log-format", "console", "log format on stderr: json or console")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: orchestrd serve [--home DIR] [--config FILE] [--log-format json|console]")
		fmt.Fprintln(stderr, "Runs the daemon in the foreground until SIGTERM or SIGINT.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "orchestrd serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var logger zerolog.Logger
	switch *logFormat {
	case "json":
		logger = zerolog.New(stderr).With().Timestamp().Logger()
	case "console":
		logger = zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly,
			NoColor: !isTerminal(stderr)}).With().Timestamp().Logger()
	default:
		fmt.Fprintf(stderr, "orchestrd serve: --log-format must be json or console, got %q\n", *logFormat)
		return 2
	}
	// Runners inherit the daemon's environment and write to its stderr:
	// make their logs match (colour only on a terminal), and keep them to
	// warnings and errors unless asked (their comings and goings are in
	// the event log), so a quiet daemon's stderr is one line at start and
	// one at the end.
	os.Setenv(runner.EnvLogFormat, *logFormat)
	os.Setenv(runner.EnvLogColor, strconv.FormatBool(isTerminal(stderr)))
	if os.Getenv(runner.EnvLogLevel) == "" {
		os.Setenv(runner.EnvLogLevel, "warn")
	}
	h := resolveHome(*home)
	cfg := lanes.DefaultConfig()
	path := *cfgPath
	if path == "" {
		if _, err := os.Stat(filepath.Join(h, "config.toml")); err == nil {
			path = filepath.Join(h, "config.toml")
		}
	}
	if path != "" {
		c, err := lanes.LoadConfig(path)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd serve: %v\n", err)
			return 2
		}
		cfg = c
	}
	err := daemon.Run(context.Background(), daemon.Options{Home: h, Config: cfg, Logger: logger, Version: version})
	var running *daemon.AlreadyRunningError
	if errors.As(err, &running) {
		fmt.Fprintf(stderr, "orchestrd serve: %v\n", err)
		return 1
	}
	if err != nil {
		logger.Error().Err(err).Msg("orchestrd stopped with an error")
		return 1
	}
	return 0
}
