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
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/lanes/runner"
)

// version is set with -ldflags "-X main.version=..." in releases.
var version = "0.1.0-dev"

// usage is the top-level usage, in the format of every command's --help
// (printUsage).
const usage = `orchestrd [--home DIR] COMMAND [ARGS...]

A supervisor for AI-agent processes.

commands:
  serve     run the daemon in the foreground
  run       run a job, stream its output, exit with its code
  logs      logs ID [-f]: a job's output (-f: follow it until it ends)
  jobs      list jobs
  cancel    cancel a job
  approvals pending approvals (--all: history, --watch: answer them as they come; rules [rm ID])
  approve   approve ID [--always [--suggestion N]] [--message M]: allow a pending approval
  deny      deny ID [--message M]: deny a pending approval
  reply     reply ID MESSAGE: answer a pending approval with a message for the agent
  prompt    run a prompt on an executor pool, stream what the agent does, exit with its status
  tasks     list executor tasks
  stop      stop TASK [--force]: stop an executor task
  session   session ID: a session's transcript
  terminal  a shell on a PTY an executor spawns, attached to this terminal (--list: the open ones)
  status    lanes, runners and the live actor tree
  events    read the supervisor event log
  lane      lane token LANE: the join token of a lane that takes bring-your-own runners
  clanker   clanker's repos (serve-repo PATH: serve one now; resume PATH: after a usage limit)
  http      http key: the Loopsy API key peers and the loopsy CLI present
  peers     the Loopsy peers this daemon knows (add ADDRESS[:PORT], rm NODE_ID); run --peer NAME runs a job on one
  executor  an executor that runs a command-line agent per prompt (an [executors.NAME] command)
  runner    a lane's runner process (spawned by the daemon, or a bring-your-own runner)
  version   print the version

Run 'orchestrd COMMAND --help' (or 'orchestrd help COMMAND') for its options.
--home DIR goes before or after the command.`

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

func realMain(args []string, stdout, stderr io.Writer) int {
	// Global flags come before the command: orchestrd --home X jobs.
	fs := flag.NewFlagSet("orchestrd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	home := fs.String("home", "", "daemon home `DIR` for the command (default $ORCHESTRD_HOME or ~/.orchestrd)")
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, usage, stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		printUsage(fs, usage, stderr)
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, "orchestrd", version)
		return exitOK
	}
	if fs.NArg() == 0 {
		printUsage(fs, usage, stderr)
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	// A global --home is the command's own --home, given first: one given
	// after the command still wins.
	withHome := func(rest []string) []string {
		if *home == "" {
			return rest
		}
		return append([]string{"--home", *home}, rest...)
	}
	switch cmd {
	case "serve":
		return cmdServe(withHome(rest), stdout, stderr)
	case "runner":
		if *home != "" {
			fmt.Fprintln(stderr, "orchestrd runner: --home is not used by runner (it takes --socket PATH)")
			return exitUsage
		}
		return runner.Main(rest)
	case "sandbox-exec":
		return cmdSandboxExec(rest, stderr)
	case "executor":
		if *home != "" {
			fmt.Fprintln(stderr, "orchestrd executor: --home is not used by executor (the daemon gives it --socket PATH)")
			return exitUsage
		}
		return cmdExecutor(rest, stdout, stderr)
	case "run":
		return cmdRun(withHome(rest), stdout, stderr)
	case "logs":
		return cmdLogs(withHome(rest), stdout, stderr)
	case "jobs":
		return cmdJobs(withHome(rest), stdout, stderr)
	case "cancel":
		return cmdCancel(withHome(rest), stdout, stderr)
	case "status":
		return cmdStatus(withHome(rest), stdout, stderr)
	case "approvals":
		return cmdApprovals(withHome(rest), stdout, stderr)
	case "approve":
		return cmdApprove(withHome(rest), stdout, stderr)
	case "deny":
		return cmdDeny(withHome(rest), stdout, stderr)
	case "reply":
		return cmdReply(withHome(rest), stdout, stderr)
	case "prompt":
		return cmdPrompt(withHome(rest), stdout, stderr)
	case "tasks":
		return cmdTasks(withHome(rest), stdout, stderr)
	case "stop":
		return cmdStop(withHome(rest), stdout, stderr)
	case "session":
		return cmdSession(withHome(rest), stdout, stderr)
	case "terminal":
		return cmdTerminal(withHome(rest), stdout, stderr)
	case "events":
		return cmdEvents(rest, resolveHome(*home), stdout, stderr)
	case "lane":
		return cmdLane(withHome(rest), stdout, stderr)
	case "clanker":
		return cmdClanker(withHome(rest), stdout, stderr)
	case "peers":
		return cmdPeers(withHome(rest), stdout, stderr)
	case "http":
		return cmdHTTP(withHome(rest), stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "orchestrd", version)
		return exitOK
	case "help":
		if len(rest) > 0 && rest[0] != "help" {
			return realMain([]string{rest[0], "--help"}, stdout, stderr)
		}
		printUsage(fs, usage, stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "orchestrd: unknown command %q\n", cmd)
	printUsage(fs, usage, stderr)
	return exitUsage
}

const serveUsage = `orchestrd serve [--home DIR] [--config FILE] [--log-format json|console]

Runs the daemon in the foreground until SIGTERM or SIGINT.`

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve")
	home := fs.String("home", "", "daemon home `DIR`: sockets, config.toml, events.ndjson (default $ORCHESTRD_HOME or ~/.orchestrd)")
	cfgPath := fs.String("config", "", "TOML config `FILE` (default HOME/config.toml if it exists, else the embedded defaults)")
	logFormat := fs.String("log-format", "console", "log `FORMAT` on stderr: json or console")
	if code, ok := parseFlags(fs, serveUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, serveUsage, stderr, "unexpected argument %q", fs.Arg(0))
	}
	var logger zerolog.Logger
	switch *logFormat {
	case "json":
		logger = zerolog.New(stderr).With().Timestamp().Logger()
	case "console":
		logger = zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly,
			NoColor: !runner.IsTerminal(stderr)}).With().Timestamp().Logger()
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
	os.Setenv(runner.EnvLogColor, strconv.FormatBool(runner.IsTerminal(stderr)))
	if os.Getenv(runner.EnvLogLevel) == "" {
		os.Setenv(runner.EnvLogLevel, "warn")
	}
	h := resolveHome(*home)
	cfg := daemon.DefaultConfig()
	path := *cfgPath
	if path == "" {
		if _, err := os.Stat(filepath.Join(h, "config.toml")); err == nil {
			path = filepath.Join(h, "config.toml")
		}
	}
	if path != "" {
		c, err := daemon.LoadConfig(path)
		if err != nil {
			// One line per problem, each naming its key.
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(stderr, "orchestrd serve: %s\n", line)
			}
			return 2
		}
		cfg = c
	}
	err := daemon.Run(context.Background(), daemon.Options{Home: h, Config: cfg, Logger: logger, Version: version})
	var stErr *daemon.StateError
	if errors.As(err, &stErr) {
		// One line naming the file and the problem, like a bad config.
		fmt.Fprintf(stderr, "orchestrd serve: %s\n", strings.ReplaceAll(stErr.Error(), "\n", " "))
		return 2
	}
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
