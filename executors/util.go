package executors

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/platform/proc"
)

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// exitWords says how a process ended: "exit code 3", "killed by SIGKILL".
func exitWords(e proc.Exit) string {
	if e.Signal != 0 {
		return "killed by " + signalName(e.Signal)
	}
	return fmt.Sprintf("exit code %d", e.Code)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
