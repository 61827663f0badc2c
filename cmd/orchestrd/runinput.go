package main

// What `run` sends besides argv: the job's stdin, its working directory as
// given, a --timeout that also takes plain seconds.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/lanes/runner"
)

// timeoutFlag is --timeout: a number of seconds ("5", "1.5") or a Go
// duration ("500ms", "2m", "1h30m").
type timeoutFlag struct{ d *time.Duration }

func (f timeoutFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f timeoutFlag) Set(v string) error {
	if secs, err := strconv.ParseFloat(v, 64); err == nil && !strings.ContainsAny(v, "xXpPnNiI") {
		if secs < 0 {
			return fmt.Errorf("must not be negative, got %s", v)
		}
		if secs*float64(time.Second) > math.MaxInt64 {
			return fmt.Errorf("%s seconds is too long", v)
		}
		*f.d = time.Duration(secs * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("want seconds (30, 1.5) or a duration (500ms, 2m, 1h30m), got %q", v)
	}
	if d < 0 {
		return fmt.Errorf("must not be negative, got %s", v)
	}
	*f.d = d
	return nil
}

// workDir is a command's --cwd: the current directory when empty, else
// made absolute (as absDir). The error names what was being resolved.
func workDir(flagValue string) (string, error) {
	dir, err := flagValue, error(nil)
	if dir == "" {
		dir, err = os.Getwd()
	} else {
		dir, err = absDir(dir)
	}
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	return dir, nil
}

// absDir makes a --cwd or --worktree absolute against the current
// directory without cleaning it: the runner resolves it the way the kernel
// does, where "link/.." climbs from the link's target and not back to
// where the text says.
func absDir(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(wd, "/") + "/" + p, nil
}

// forwardedStdin is the stdin run streams to the job: its own, unless it
// is a terminal (nothing is forwarded, as before) or --no-stdin says not
// to (nil).
func forwardedStdin(noStdin bool) *os.File {
	if noStdin || runner.IsTerminal(os.Stdin) {
		return nil
	}
	return os.Stdin
}
