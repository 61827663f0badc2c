package lanes

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// runnerIsolation is what a runner is started in (see proc.SandboxAttr):
// with the sandbox on (the default), a mount namespace where it hides the
// daemon's home from its jobs and a pid namespace whose init it is, so
// that its jobs can neither see nor signal the daemon, other runners or
// other lanes' jobs, and when it dies, by any cause, everything in it dies
// too (a daemon killed with -9 takes every runner and job with it). For
// network "none" also a fresh network namespace: jobs reach nothing, not
// even the host's 127.0.0.1. With the sandbox off (where no namespace can
// be made) the runner gets SIGHUP when the daemon dies, and then kills its
// jobs itself.
func runnerIsolation(network string, cg *proc.Cgroup, sandbox bool) proc.Isolation {
	return proc.Isolation{Sandbox: sandbox, NoNetwork: network == NetworkNone, Cgroup: cg, DeathSignal: syscall.SIGHUP}
}

// hiddenPaths is what every runner hides from its jobs: the daemon's home
// (its sockets, join tokens, event log), by its real path, so a symlink
// to it leads to the mask too.
func hiddenPaths(home string) ([]string, error) {
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("resolving home %s: %w", home, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("resolving home %s: %w", home, err)
	}
	return []string{real}, nil
}

// runnersCgroup makes the daemon's cgroup for its runners, below the
// cgroup it runs in: orchestrd-PID, each runner incarnation a child of it
// and each job a child of that. It returns nil (jobs are then tracked by
// process group and the runners' subreaper) where there is no cgroup v2
// or the daemon may not create cgroups (a non-root daemon outside a
// delegated cgroup). Directories left by daemons that are gone are
// removed first.
func runnersCgroup(log zerolog.Logger) *proc.Cgroup {
	dir, err := proc.OwnCgroupDir()
	var own *proc.Cgroup
	if err == nil {
		own, err = proc.OpenCgroup(dir)
	}
	if err != nil {
		log.Info().Err(err).Msg("no cgroup v2 for jobs: each job is tracked by its process group and its runner, the subreaper")
		return nil
	}
	defer own.Close()
	for _, n := range own.Children() {
		pid, ok := strings.CutPrefix(n, "orchestrd-")
		if p, err := strconv.Atoi(pid); ok && err == nil && p != os.Getpid() && syscall.Kill(p, 0) == syscall.ESRCH {
			// Another user's daemon's is not ours to remove.
			if err := own.RemoveChild(n); err != nil && !errors.Is(err, fs.ErrPermission) {
				log.Warn().Err(err).Str("cgroup", dir+"/"+n).Msg("a cgroup left by a daemon that is gone could not be removed")
			}
		}
	}
	cg, err := own.Mkdir("orchestrd-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		log.Info().Err(err).Msg("cannot create cgroups for jobs: each job is tracked by its process group and its runner, the subreaper")
		return nil
	}
	return cg
}

// killOrphan is the daemon's reaper's verdict on a process re-parented to
// it: a job process whose runner died (only without the sandbox: with it,
// the runner's pid namespace dies whole). Its process group and itself are
// killed, and the event names the job it belonged to (its
// ORCHESTRD_JOB_ID), so the 3 a.m. reader knows whose it was.
func killOrphan(bus *eventlog.Bus, o proc.Orphan) {
	st, _ := proc.ReadStat(o.Pid)
	jobID := proc.EnvValue(o.Pid, runner.EnvJobID)
	if o.Pgid > 1 && o.Pgid != syscall.Getpgrp() {
		_ = syscall.Kill(-o.Pgid, syscall.SIGKILL)
	}
	_ = syscall.Kill(o.Pid, syscall.SIGKILL)
	bus.Emit(OrphanKilled{Pid: o.Pid, Pgid: o.Pgid, JobID: jobID, Command: st.Comm, Reason: "runner_gone"})
}

// tokenDir holds one join token per lane that takes bring-your-own
// runners, 0600, in a 0700 directory of the home.
func tokenDir(home string) string { return filepath.Join(home, "tokens") }

// JoinTokenPath is where lane's join token is kept (what `orchestrd lane
// token L` prints).
func JoinTokenPath(home, lane string) string { return filepath.Join(tokenDir(home), lane) }

// writeJoinTokens gives every lane that takes bring-your-own runners its
// join token, kept across restarts (so a runner configured with it keeps
// working), and removes the token of every lane that does not.
func writeJoinTokens(home string, lanes map[string]*laneHandle) error {
	dir := tokenDir(home)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("making %s private: %w", dir, err)
	}
	for name, h := range lanes {
		path := JoinTokenPath(home, name)
		if !h.cfg.AcceptsExternal() {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("removing lane %s's join token: %w", name, err)
			}
			continue
		}
		tok, err := readToken(path)
		if err != nil {
			tok = api.RandomHex(32)
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
				return fmt.Errorf("writing lane %s's join token: %w", name, err)
			}
			if err := os.Rename(tmp, path); err != nil {
				return fmt.Errorf("writing lane %s's join token: %w", name, err)
			}
		}
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("making lane %s's join token private: %w", name, err)
		}
		h.token = tok
	}
	return nil
}

// readToken reads a join token file: 64 hex digits.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if _, err := hex.DecodeString(tok); err != nil || len(tok) != 64 {
		return "", fmt.Errorf("%s does not hold a join token", path)
	}
	return tok, nil
}

// ReadJoinToken returns lane's join token from the home, for `orchestrd
// lane token`.
func ReadJoinToken(home, lane string) (string, error) {
	tok, err := readToken(JoinTokenPath(home, lane))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("lane %q has no join token in %s: either it does not take bring-your-own runners "+
			"(external_runners = false, the default for lanes with runners > 0) or no daemon has started on this home with it", lane, home)
	}
	return tok, err
}
