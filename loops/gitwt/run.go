package gitwt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/platform/proc"
)

// Who orchestrd's commits and merges are by (author and committer).
const (
	AuthorName  = "orchestrd"
	AuthorEmail = "orchestrd@localhost"
)

// Bounds on what is read of git.
const (
	maxStderr = 64 << 10 // kept of a command's stderr, for GitError.Output
	maxStdout = 4 << 20  // read of a command's stdout (listings); more is an error
	maxConfig = 1000     // driver overrides: more filter/merge drivers than this is refused
)

// GitError is a git command that failed. Its Error() names the command
// and its exit status only: git's own words may quote file names the
// agent chose, so they are kept apart in Output (bounded) for a caller
// that shows them to a person, and never reach a log through Error().
type GitError struct {
	Op      string // what orchestrd was doing ("committing", "merging"...)
	Command string // the git subcommand ("commit", "merge"...)
	Exit    int    // its exit status; -1 when it did not run to an exit
	Err     error  // why it did not run to an exit (context, exec); nil otherwise
	Output  []byte // its stderr, at most 64 KiB: may name agent-written files
	Cut     int64  // bytes of stderr not kept
}

func (e *GitError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: git %s: %v", e.Op, e.Command, e.Err)
	}
	return fmt.Sprintf("%s: git %s: exit status %d (%d bytes on stderr)", e.Op, e.Command, e.Exit, int64(len(e.Output))+e.Cut)
}

// Unwrap is the reason it did not run (a context's error, exec's).
func (e *GitError) Unwrap() error { return e.Err }

// FirstLine is the first non-empty line of git's stderr, at most 200
// bytes, invalid UTF-8 and control characters replaced: for a person
// (it may name an agent-written file, so not for the event log).
func (e *GitError) FirstLine() string {
	for _, l := range bytes.Split(e.Output, []byte{'\n'}) {
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		if len(l) > 200 {
			l = l[:200]
		}
		s := strings.ToValidUTF8(string(l), "\uFFFD")
		return strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == utf8.RuneError {
				return '?'
			}
			return r
		}, s)
	}
	return ""
}

// capped keeps the first max bytes written and counts the rest.
type capped struct {
	buf bytes.Buffer
	max int
	cut int64
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		c.buf.Write(p[:room])
	}
	c.cut += int64(len(p) - room)
	return len(p), nil
}

// home is the private, empty HOME every git runs with (nothing of the
// user's or an agent's is read from it).
var home = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp("", "orchestrd-git-home-")
})

// baseConfig is what every git runs with, as command-line config (the
// highest precedence, inherited by the git processes it starts), over
// whatever the repository's .git/config or a worktree's config.worktree
// say: the agent may have written them.
var baseConfig = [][2]string{
	{"core.hooksPath", "/dev/null"}, // no hook runs: /dev/null/<hook> is never there
	{"core.fsmonitor", "false"},
	{"core.attributesFile", "/dev/null"},
	{"core.excludesFile", "/dev/null"},
	{"core.sshCommand", "false"},
	{"core.askPass", ""},
	{"core.pager", "cat"},
	{"core.editor", ":"},
	{"core.symlinks", "true"},
	{"core.untrackedCache", "false"},
	{"core.quotePath", "false"},
	{"commit.gpgSign", "false"},
	{"tag.gpgSign", "false"},
	{"merge.verifySignatures", "false"},
	{"merge.default", "text"}, // the built-in 3-way text merge for paths without a merge attribute
	{"merge.log", "false"},
	{"protocol.allow", "never"}, // no transport at all: nothing here fetches
	{"submodule.recurse", "false"},
	{"status.submoduleSummary", "false"},
	{"fetch.recurseSubmodules", "false"},
	{"gc.auto", "0"}, // no background gc left running behind us
	{"maintenance.auto", "false"},
	{"rerere.enabled", "false"},
	{"rerere.autoUpdate", "false"},
	{"user.useConfigOnly", "false"},
	{"advice.detachedHead", "false"},
}

// env is the clean environment of every git: nothing of the daemon's
// (no GIT_DIR, no GIT_* of a test run), no system or global config, a
// private HOME, our identity, no prompt, and the config overrides.
func env(overrides [][2]string) ([]string, error) {
	h, err := home()
	if err != nil {
		return nil, fmt.Errorf("making git's private HOME: %w", err)
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	e := []string{
		"PATH=" + path,
		"HOME=" + h,
		"XDG_CONFIG_HOME=" + h,
		"LANG=C",
		"LC_ALL=C",
		"TZ=UTC",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"GIT_EDITOR=:",
		"GIT_PAGER=cat",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_AUTHOR_NAME=" + AuthorName,
		"GIT_AUTHOR_EMAIL=" + AuthorEmail,
		"GIT_COMMITTER_NAME=" + AuthorName,
		"GIT_COMMITTER_EMAIL=" + AuthorEmail,
	}
	if t := os.Getenv("TMPDIR"); t != "" {
		e = append(e, "TMPDIR="+t)
	}
	// GIT_CONFIG_COUNT/KEY_n/VALUE_n: command-line config without -c's
	// parsing (a driver's name may hold '=' or spaces).
	all := append(append([][2]string(nil), baseConfig...), overrides...)
	e = append(e, "GIT_CONFIG_COUNT="+strconv.Itoa(len(all)))
	for i, kv := range all {
		n := strconv.Itoa(i)
		e = append(e, "GIT_CONFIG_KEY_"+n+"="+kv[0], "GIT_CONFIG_VALUE_"+n+"="+kv[1])
	}
	return e, nil
}

// scope is where a git command runs: the git directory and the work tree
// are always ours, given explicitly, never discovered from a .git file an
// agent could have rewritten.
type scope struct {
	op        string      // for errors
	gitDir    string      // the repository's .git, or .git/worktrees/<name>
	workTree  string      // "" for commands that need none
	overrides [][2]string // the drivers' overrides (hardening)
}

// run runs git args in s and returns its stdout (at most maxStdout).
func run(ctx context.Context, s scope, args ...string) ([]byte, error) {
	stdout := &capped{max: maxStdout}
	err := runTo(ctx, s, stdout, args...)
	if err == nil && stdout.cut > 0 {
		return nil, fmt.Errorf("%s: git %s: more than %d bytes of output", s.op, args[0], maxStdout)
	}
	return stdout.buf.Bytes(), err
}

// runTo runs git args in s, its stdout written to stdout.
func runTo(ctx context.Context, s scope, stdout io.Writer, args ...string) error {
	e, err := env(s.overrides)
	if err != nil {
		return err
	}
	full := []string{"--no-pager", "--git-dir=" + s.gitDir}
	dir := s.gitDir
	if s.workTree != "" {
		full = append(full, "--work-tree="+s.workTree)
		dir = s.workTree
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = e
	cmd.Dir = dir
	stderr := capped{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	// Its own process group, killed whole when ctx ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sb := sandbox.Load(); sb != nil && cmd.Err == nil {
		// In the agents' sandbox: its own mount and pid namespaces (the
		// leader of its own session: the group is still its pid), the
		// daemon's home hidden, no capability.
		args := append([]string{sb.exe, "sandbox-exec"}, sb.hide...)
		cmd.Args = append(append(args, "--", cmd.Path), full...)
		cmd.Path = sb.exe
		cmd.SysProcAttr = proc.SandboxAttr(proc.Isolation{Sandbox: true})
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	err = start(cmd)
	if err == nil {
		err = cmd.Wait()
		if st := starter.Load(); st != nil {
			(*st).Unregister(cmd.Process.Pid)
		}
	}
	if err != nil {
		ge := &GitError{Op: s.op, Command: sub, Exit: -1, Output: stderr.buf.Bytes(), Cut: stderr.cut}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() && ctx.Err() == nil {
			ge.Exit = ee.ExitCode()
		} else if ctx.Err() != nil {
			ge.Err = ctx.Err()
		} else {
			ge.Err = err
		}
		return ge
	}
	return nil
}

// records is an io.Writer that hands fn each NUL-terminated record
// written to it (a record over 64 KiB is cut to that and counted in
// long: git's paths are far shorter).
type records struct {
	fn   func(rec []byte)
	part []byte
	long int
}

func (r *records) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, 0)
		if i < 0 {
			r.add(p)
			break
		}
		r.add(p[:i])
		r.fn(r.part)
		r.part = r.part[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (r *records) add(b []byte) {
	room := 64<<10 - len(r.part)
	if len(b) > room {
		b = b[:room]
		r.long++
	}
	r.part = append(r.part, b...)
}

// Starter registers the processes a daemon starts with its child
// subreaper (proc.Reaper), which otherwise takes a child it did not
// register for an orphan (and kills it).
type Starter interface {
	Start(fork func() (int, error)) (int, error)
	Unregister(pid int)
}

var starter atomic.Pointer[Starter]

type gitSandbox struct {
	exe  string
	hide []string // sandbox-exec's --hide arguments
}

var sandbox atomic.Pointer[gitSandbox]

// SetSandbox makes every git run in the sandbox agents run in: through
// `exe sandbox-exec` (exe the orchestrd binary), in mount and pid
// namespaces of its own (a user namespace too without root), with hide
// (the daemon's home, the hook's socket) and the cgroup tree hidden and
// every capability dropped, so that a setting of the repository's that
// the hardening missed still reaches nothing of the daemon's. exe ""
// turns it off (git runs as the daemon's child, plainly).
func SetSandbox(exe string, hide []string) {
	if exe == "" {
		sandbox.Store(nil)
		return
	}
	sb := &gitSandbox{exe: exe}
	for _, h := range hide {
		sb.hide = append(sb.hide, "--hide", h)
	}
	sandbox.Store(sb)
}

// SetStarter makes every git process start through s (the daemon's
// reaper); nil: plainly.
func SetStarter(s Starter) {
	if s == nil {
		starter.Store(nil)
		return
	}
	starter.Store(&s)
}

// start starts cmd, through the Starter when there is one.
func start(cmd *exec.Cmd) error {
	st := starter.Load()
	if st == nil {
		return cmd.Start()
	}
	_, err := (*st).Start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	return err
}

// exitCode is 0 for no error, a GitError's exit status, or -1.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.Exit
	}
	return -1
}

// hardening lists the filter and merge drivers the config git would read
// for gitDir names (the repository's and a worktree's, includes
// followed), and overrides each so that none runs a command: a filter's
// clean, smudge and process become empty (git then passes content
// through) and not required; a merge driver becomes `false` (the path is
// a conflict). The driver's name comes from .gitattributes, which the
// agent writes; the command from config, which it might: neither is
// trusted.
func hardening(ctx context.Context, op, gitDir string) ([][2]string, error) {
	out, err := run(ctx, scope{op: op, gitDir: gitDir}, "config", "--null", "--get-regexp", `^(filter|merge)\.`)
	if exitCode(err) == 1 { // no such key
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ov [][2]string
	for _, rec := range bytes.Split(out, []byte{0}) {
		key, _, _ := bytes.Cut(rec, []byte{'\n'})
		k := string(key)
		var section string
		switch {
		case strings.HasPrefix(k, "filter."):
			section = "filter"
		case strings.HasPrefix(k, "merge."):
			section = "merge"
		default:
			continue
		}
		rest := k[len(section)+1:]
		i := strings.LastIndexByte(rest, '.')
		if i < 0 { // a two-level key (merge.ff...): no driver
			continue
		}
		name := rest[:i]
		if seen[section+"\x00"+name] {
			continue
		}
		seen[section+"\x00"+name] = true
		if len(seen) > maxConfig {
			return nil, fmt.Errorf("%s: the repository's config defines more than %d filter and merge drivers: refused", op, maxConfig)
		}
		p := section + "." + name + "."
		if section == "filter" {
			ov = append(ov, [2]string{p + "clean", ""}, [2]string{p + "smudge", ""},
				[2]string{p + "process", ""}, [2]string{p + "required", "false"})
		} else {
			ov = append(ov, [2]string{p + "driver", "false"}, [2]string{p + "recursive", "text"})
		}
	}
	return ov, nil
}

// locks serialise operations on one repository (by its .git), across
// every Repo opened on it: git's index.lock and ref locks would
// otherwise fail one of two concurrent commands.
var locks sync.Map // string -> chan struct{}

func lockRepo(ctx context.Context, gitDir string) (func(), error) {
	v, _ := locks.LoadOrStore(filepath.Clean(gitDir), make(chan struct{}, 1))
	ch := v.(chan struct{})
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the repository's lock: %w", ctx.Err())
	}
}

// MinVersion is the oldest git orchestrd runs: GIT_CONFIG_COUNT (2.31),
// which carries the overrides, and GIT_CONFIG_GLOBAL (2.32). An older git
// would ignore them, silently: refused.
var MinVersion = [2]int{2, 32}

var version = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := run(ctx, scope{op: "reading git's version", gitDir: "/"}, "version")
	return strings.TrimSpace(string(out)), err
})

// checkVersion refuses a git older than MinVersion.
func checkVersion() error {
	v, err := version()
	if err != nil {
		return err
	}
	return versionOK(v)
}

// versionOK: v ("git version 2.39.5") is MinVersion or newer.
func versionOK(v string) error {
	f := strings.Fields(v) // git version 2.39.5
	if len(f) >= 3 {
		n := strings.SplitN(f[2], ".", 3)
		if len(n) >= 2 {
			maj, e1 := strconv.Atoi(n[0])
			min, e2 := strconv.Atoi(n[1])
			if e1 == nil && e2 == nil {
				if maj > MinVersion[0] || maj == MinVersion[0] && min >= MinVersion[1] {
					return nil
				}
				return fmt.Errorf("%q is older than git %d.%d, which orchestrd needs to run git safely", v, MinVersion[0], MinVersion[1])
			}
		}
	}
	return fmt.Errorf("git's version %q: not understood", v)
}
