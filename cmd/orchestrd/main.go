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
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	// Runs `orchestrd runner` before the daemon's packages are initialised.
	_ "github.com/orchestrd/orchestrd/cmd/orchestrd/internal/runnerentry"
	"github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/lanes/runner"
)

// version is set with -ldflags "-X main.version=..." in releases.
var version = "0.1.0-dev"

// usageHead and usageFoot frame the top-level usage, in the format of
// every command's --help (printUsage); the commands between them come from
// the command table.
const (
	usageHead = `orchestrd [--home DIR] COMMAND [ARGS...]

A supervisor for AI-agent processes.

commands:
`
	usageFoot = `
Run 'orchestrd COMMAND --help' (or 'orchestrd help COMMAND') for its options.
--home DIR goes before or after the command.`
)

// command is one of orchestrd's commands: what dispatches it, lists it in
// the help, suggests it for a typo and completes it.
type command struct {
	name    string
	summary string // its line in orchestrd help
	run     func(args []string, stdout, stderr io.Writer) int
	// noHome refuses a global --home, saying why (runner, executor:
	// started with a socket, not a home); otherwise the command takes
	// the global --home as its own.
	noHome string
	hidden bool     // sandbox-exec: neither listed, suggested nor completed
	subs   []string // its subcommands, for completion ("rules", "rules rm")
	ids    string   // "jobs" or "approvals": its argument is such an id, for completion
}

// commands are orchestrd's commands, in the order help lists them. Set in
// init: help and completion read it.
var commands []command

func init() {
	commands = []command{
		{name: "serve", summary: "run the daemon in the foreground", run: cmdServe},
		{name: "run", summary: "run a job, stream its output, exit with its code", run: cmdRun},
		{name: "logs", summary: "logs ID [-f]: a job's output, byte for byte (-f: follow it to its end)", run: cmdLogs, ids: "jobs"},
		{name: "jobs", summary: "list jobs, newest first", run: cmdJobs},
		{name: "job", summary: "job ID: a job's record", run: cmdJob, ids: "jobs"},
		{name: "wait", summary: "wait ID: wait for a job's end, exit with its code", run: cmdWait, ids: "jobs"},
		{name: "cancel", summary: "cancel a job", run: cmdCancel, ids: "jobs"},
		{name: "approvals", summary: "pending approvals (--all: history, --watch: answer them as they come; rules [rm ID]; telegram import)",
			run: cmdApprovals, subs: []string{"rules", "rules rm", "telegram", "telegram import"}},
		{name: "approve", summary: "approve ID [--always [--suggestion N]] [--message M]: allow a pending approval", run: cmdApprove, ids: "approvals"},
		{name: "deny", summary: "deny ID [--message M]: deny a pending approval", run: cmdDeny, ids: "approvals"},
		{name: "reply", summary: "reply ID MESSAGE: answer a pending approval with a message for the agent", run: cmdReply, ids: "approvals"},
		{name: "prompt", summary: "run a prompt on an executor pool, stream what the agent does, exit with its status", run: cmdPrompt},
		{name: "tasks", summary: "list executor tasks", run: cmdTasks},
		{name: "stop", summary: "stop TASK [--force]: stop an executor task", run: cmdStop},
		{name: "session", summary: "session ID: a session's transcript", run: cmdSession},
		{name: "chat", summary: "a conversation with the agent of [loops] chat_executor: lines from stdin, the reply streamed", run: cmdChat},
		{name: "terminal", summary: "a shell on a PTY an executor spawns, attached to this terminal (--list: the open ones)", run: cmdTerminal},
		{name: "status", summary: "lanes, runners and the live actor tree (in a fleet: its cluster and this node)", run: cmdStatus},
		{name: "events", summary: "read the supervisor event log", run: func(args []string, stdout, stderr io.Writer) int {
			return cmdEvents(args, resolveHome(""), stdout, stderr)
		}},
		{name: "loops", summary: "the loops as a tree, as Loopr's TUI draws them (--watch: live)", run: cmdLoops},
		{name: "loop", summary: "loop plan|code TEXT | show ID | start|pause|resume|cancel|rm|merge ID: make and steer loops",
			run: cmdLoop, subs: sortedKeys(loopCommands)},
		{name: "plan", summary: "plan show|approve|reject|iterate ID: the plan gate", run: cmdPlan, subs: sortedKeys(planCommands)},
		{name: "lane", summary: "lane token LANE: the join token of a lane that takes bring-your-own runners",
			run: cmdLane, subs: sortedKeys(laneCommands)},
		{name: "clanker", summary: "clanker's repos (serve-repo PATH: serve one now; resume PATH: after a usage limit)",
			run: cmdClanker, subs: sortedKeys(clankerCommands)},
		{name: "ui", summary: "a one-time link that signs a browser in to the dashboard (/ui/)", run: cmdUI},
		{name: "http", summary: "http key: the Loopsy API key peers and the loopsy CLI present", run: cmdHTTP, subs: []string{"key"}},
		{name: "peers", summary: "the Loopsy peers this daemon knows (add ADDRESS[:PORT], rm NODE_ID); run --peer NAME runs a job on one",
			run: cmdPeers, subs: []string{"list", "add", "rm"}},
		{name: "executor", summary: "an executor that runs a command-line agent per prompt (an [executors.NAME] command)",
			run: cmdExecutor, noHome: "--home is not used by executor (the daemon gives it --socket PATH)"},
		{name: "runner", summary: "a lane's runner process (spawned by the daemon, or a bring-your-own runner)",
			run:    func(args []string, _, _ io.Writer) int { return runner.Main(args) },
			noHome: "--home is not used by runner (it takes --socket PATH)"},
		{name: "sandbox-exec", hidden: true, run: func(args []string, _, stderr io.Writer) int { return cmdSandboxExec(args, stderr) }},
		{name: "nodes", summary: "the daemon's fleet: nodes, their shared lanes and free slots, last heartbeat, state (a lost node: since when)", run: cmdNodes},
		{name: "cluster", summary: "cluster init | add-node NAME: make the fleet's key and each node's own credentials (cluster.creds)",
			run: cmdCluster, subs: []string{"init", "add-node"}},
		{name: "version", summary: "print the version, commit and Go version", run: cmdVersion},
		{name: "completion", summary: "completion bash|zsh|fish: a completion script for the shell", run: cmdCompletion,
			subs: sortedKeys(completionShellNames)},
		{name: "help", summary: "help COMMAND: a command's options", run: cmdHelp},
	}
}

// usageText is the top-level usage: the commands from the table.
func usageText() string {
	w := 0
	for _, c := range commands {
		if !c.hidden {
			w = max(w, len(c.name))
		}
	}
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(&b, "  %-*s  %s\n", w, c.name, c.summary)
		}
	}
	b.WriteString(usageFoot)
	return b.String()
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

// globalFlags are the flags before the command.
func globalFlags() (fs *flag.FlagSet, home *string, showVersion *bool) {
	fs = flag.NewFlagSet("orchestrd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	home = fs.String("home", "", "daemon home `DIR` for the command (default $ORCHESTRD_HOME or ~/.orchestrd)")
	showVersion = fs.Bool("version", false, "print the version")
	return fs, home, showVersion
}

func realMain(args []string, stdout, stderr io.Writer) int {
	// Global flags come before the command: orchestrd --home X jobs.
	fs, home, showVersion := globalFlags()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, usageText(), stdout)
			return exitOK
		}
		return usageLine(stderr, "", flagError(fs, err))
	}
	if *showVersion {
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	}
	if fs.NArg() == 0 {
		printUsage(fs, usageText(), stderr)
		return exitUsage
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	cmd := findCommand(name)
	if cmd == nil {
		msg := fmt.Sprintf("unknown command %q", name)
		if s := suggest(name, commandNames()); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		return usageLine(stderr, "", msg)
	}
	if *home != "" {
		if cmd.noHome != "" {
			return usageLine(stderr, cmd.name, cmd.noHome)
		}
		// A global --home is the command's own --home, given first: one
		// given after the command still wins.
		rest = append([]string{"--home", *home}, rest...)
	}
	return cmd.run(rest, stdout, stderr)
}

// findCommand is the command named name, or nil.
func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

const helpUsage = `orchestrd help [COMMAND]

Lists the commands, or shows COMMAND's options (as COMMAND --help).`

// cmdHelp is help [COMMAND].
func cmdHelp(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("help")
	home := homeFlag(fs)
	pos, code, ok := parseInterspersed(fs, helpUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return usageError(fs, helpUsage, stderr, "want at most one COMMAND")
	}
	if len(pos) == 1 && pos[0] != "help" {
		return realMain(append(opt("--home", *home), pos[0], "--help"), stdout, stderr)
	}
	gfs, _, _ := globalFlags()
	printUsage(gfs, usageText(), stdout)
	return exitOK
}

const serveUsage = `orchestrd serve [--home DIR] [--config FILE] [--log-format json|console] [--log-level LEVEL]
                [--cpuprofile FILE]

Runs the daemon in the foreground until SIGTERM or SIGINT. Exit 2: a bad
config, home or flag, or a front-end the config turns on that cannot start.
--cpuprofile writes a pprof CPU profile of the whole run to FILE when the
daemon stops (for finding where time goes; it costs a few percent).`

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve")
	home := fs.String("home", "", "daemon home `DIR`: sockets, config.toml, events.ndjson (default $ORCHESTRD_HOME or ~/.orchestrd)")
	cfgPath := fs.String("config", "", "TOML config `FILE` (default HOME/config.toml if it exists, else the embedded defaults)")
	logFormat := fs.String("log-format", "console", "log `FORMAT` on stderr: json or console")
	logLevel := fs.String("log-level", "", "log `LEVEL` of the daemon and its runners: trace, debug, info, warn or error (default $"+runner.EnvLogLevel+", else info)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE` when the daemon stops")
	if code, ok := parseFlags(fs, serveUsage, args, stdout, stderr); !ok {
		return code
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd serve: %v\n", err)
			return 2
		}
		defer stop()
		// Runners profile themselves beside it (FILE.runner-ID.pprof).
		os.Setenv(runner.EnvCPUProfile, *cpuProfile+".runner")
	}
	if fs.NArg() > 0 {
		return usageError(fs, serveUsage, stderr, "unexpected argument %q", fs.Arg(0))
	}
	level, err := serveLogLevel(*logLevel, os.Getenv(runner.EnvLogLevel))
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd serve: %v\n", err)
		return 2
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
	logger = logger.Level(level)
	// Runners get ORCHESTRD_LOG_* (daemon.runnerLogEnv) and write to the
	// daemon's stderr: the same format (colour only on a terminal) and
	// level. Their routine lines are debug (their comings and goings are
	// in the event log), so a quiet daemon's stderr at info is one line
	// at start and one at the end.
	os.Setenv(runner.EnvLogFormat, *logFormat)
	os.Setenv(runner.EnvLogColor, strconv.FormatBool(runner.IsTerminal(stderr)))
	os.Setenv(runner.EnvLogLevel, level.String())
	h := resolveHome(*home)
	cfg := daemon.DefaultConfig()
	path := *cfgPath
	if path == "" {
		// HOME/config.toml is optional: missing (or no home yet, which
		// Run makes or names), the embedded defaults; there but
		// unreadable, an error (exit 2), not the defaults in silence.
		def := filepath.Join(h, "config.toml")
		if _, err := os.Stat(def); !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			path = def
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
	err = daemon.Run(context.Background(), daemon.Options{Home: h, Config: cfg, Logger: logger, Version: version})
	if setupError(err) {
		// One line naming the file and the problem, like a bad config:
		// no restart fixes it (the unit's RestartPreventExitStatus=2).
		fmt.Fprintf(stderr, "orchestrd serve: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
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

// serveLogLevel is the level of serve's log and its runners': --log-level,
// else $ORCHESTRD_LOG_LEVEL, else info.
func serveLogLevel(flagValue, env string) (zerolog.Level, error) {
	v, from := flagValue, "--log-level"
	if v == "" {
		v, from = env, "$"+runner.EnvLogLevel
	}
	switch v {
	case "":
		return zerolog.InfoLevel, nil
	case "trace", "debug", "info", "warn", "error":
		return zerolog.ParseLevel(v)
	}
	return zerolog.NoLevel, fmt.Errorf("%s must be trace, debug, info, warn or error, got %q", from, v)
}

// setupError reports whether err is Run's for what no restart fixes: the
// home, the state store, a config file it reads, a front-end the config
// turns on that cannot start.
func setupError(err error) bool {
	var home *daemon.HomeError
	var st *daemon.StateError
	var cfg *daemon.ConfigError
	var fe *daemon.FrontEndError
	return errors.As(err, &home) || errors.As(err, &st) || errors.As(err, &cfg) || errors.As(err, &fe)
}

// startCPUProfile profiles the process's CPU into a new file at path until
// the returned stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("--cpuprofile: starting the profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
