package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// restartAfter waits for the runner.exited of pid and the
// runner.restart_scheduled that follows it for the same runner, and checks
// that the restart's reason is the exit's cause.
func (d *testDaemon) restartAfter(pid int) (exited, restart map[string]any) {
	d.t.Helper()
	exited = d.waitEvent("runner.exited", func(e map[string]any) bool { return e["pid"] == float64(pid) })
	restart = d.waitEvent("runner.restart_scheduled", func(e map[string]any) bool {
		return e["runner_id"] == exited["runner_id"] && e["seq"].(float64) > exited["seq"].(float64)
	})
	if restart["reason"] != exited["cause"] {
		d.t.Errorf("runner.restart_scheduled reason %v, want the cause of its runner.exited, %v\nexited:  %v\nrestart: %v",
			restart["reason"], exited["cause"], exited, restart)
	}
	return exited, restart
}

// readyRunner is the pid of a ready, spawned runner of lane.
func (d *testDaemon) readyRunner(lane string) int {
	d.t.Helper()
	var pid int
	eventually(d.t, 20*time.Second, "a ready runner in "+lane, func() bool {
		for _, r := range d.lane(lane).Runners {
			if r.State == "ready" && r.Spawned && r.Pid > 0 {
				pid = r.Pid
				return true
			}
		}
		return false
	})
	return pid
}

// A runner killed because it stopped heartbeating is restarted for that
// reason; the restart policy's verdict (it had been up long enough: at
// once) is its own field (issue 6: the event said reason=stable_exit).
func TestRestartReasonIsTheCause(t *testing.T) {
	t.Parallel()
	t.Run("runner_unresponsive", func(t *testing.T) {
		d := startDaemon(t, fastConfig) // net: heartbeat_timeout 1s, stable 200ms
		pid := d.readyRunner("net")
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		d.waitEvent("runner.killed", func(e map[string]any) bool {
			return e["pid"] == float64(pid) && e["reason"] == "runner_unresponsive"
		})
		_, restart := d.restartAfter(pid)
		if restart["reason"] != "killed_runner_unresponsive" || restart["policy"] != "stable_exit" || restart["delay_ms"] != float64(0) {
			t.Fatalf("runner.restart_scheduled = %v, want reason killed_runner_unresponsive, policy stable_exit, delay_ms 0", restart)
		}
		waitGone(t, pid)
	})
	t.Run("memory_limit", func(t *testing.T) {
		// Every runner is over 1 MiB: each one is killed at its first
		// heartbeat, ~200 ms after it starts, after the 50 ms it needs to
		// count as stable.
		d := startDaemon(t, `
[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
max_runner_memory_bytes = 1048576
heartbeat_timeout = "600ms"
[lanes.net.restart]
stable = "50ms"
max_r = 1000
`)
		killed := d.waitEvent("runner.killed", func(e map[string]any) bool { return e["reason"] == "memory_limit" })
		_, restart := d.restartAfter(int(killed["pid"].(float64)))
		if restart["reason"] != "killed_memory_limit" || restart["policy"] != "stable_exit" {
			t.Fatalf("runner.restart_scheduled = %v, want reason killed_memory_limit, policy stable_exit", restart)
		}
		d.lanes() // note the replacements' pids for the leak check at stop
	})
	t.Run("killed from outside", func(t *testing.T) {
		d := startDaemon(t, `
[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.net.restart]
stable = "10s"
`)
		pid := d.readyRunner("net")
		d.kill("runner", pid)
		exited, restart := d.restartAfter(pid)
		if c := exited["cause"]; c != "exited" && c != "socket_closed" {
			t.Fatalf("runner.exited cause %v, want exited or socket_closed", c)
		}
		if restart["policy"] != "crash_loop" {
			t.Fatalf("runner.restart_scheduled = %v, want policy crash_loop (up less than restart.stable)", restart)
		}
		if rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"true"}})); rec.State != api.StateSucceeded {
			t.Fatalf("after the restart: %+v", rec)
		}
		d.lanes()
	})
}
