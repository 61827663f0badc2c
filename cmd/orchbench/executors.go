package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the slowed-store phase locks state.db from outside, as another process would

	"github.com/orchestrd/orchestrd/api"
)

// runExecutors: report_message throughput from one executor (the scripted
// test executor flooding) through the daemon — parsed, committed to the
// store, published — to one control-socket subscriber, against a plain
// NDJSON pipe between two processes carrying the same lines; again with a
// stalled subscriber present; again with the store locked from outside
// for 1.5 s (pause/resume, RSS, every sequence at the subscriber and in
// the store); and the time from an executor's SIGKILL to task.finished
// {executor_lost} at a subscriber.
func runExecutors(b *bench) error {
	// Throughput is the steady rate: 100,000 messages a flood (some 0.6 s),
	// the best of three floods, as the baseline is the best of three pipes.
	n := pick(b, 100000, 3000)
	const tries = 3
	base, err := floodBaseline(b, n)
	if err != nil {
		return err
	}
	d, c, err := b.startDialed("executors", executorsConfig(b.testexec))
	if err != nil {
		return err
	}
	defer d.stop()
	defer c.Close()

	paused, resumed := 0, 0 // executor.paused / executor.resumed seen by the flood's subscriber
	flood := func(phase string, started func()) (float64, *floodSub, string, error) {
		sub, err := d.floodSubscribe("task.message", "task.finished", "executor.paused", "executor.resumed", "events.dropped")
		if err != nil {
			return 0, nil, "", err
		}
		script := fmt.Sprintf(`{"steps":[{"op":"flood","n":%d}]}`, n)
		if started != nil {
			// Time for started to take effect before the flood.
			script = fmt.Sprintf(`{"steps":[{"op":"sleep","ms":300},{"op":"flood","n":%d}]}`, n)
		}
		var res struct {
			TaskID    string `json:"task_id"`
			SessionID string `json:"session_id"`
		}
		t0 := time.Now()
		if err := call(c, "task.execute", api.TaskSpec{Executor: "bench", Prompt: script, Cwd: b.tmp}, &res); err != nil {
			sub.close()
			return 0, nil, "", fmt.Errorf("%s: task.execute: %w", phase, err)
		}
		if started != nil {
			started()
			t0 = time.Now()
		}
		seen := make([]bool, n+1)
		got, dropped := 0, 0
		var last time.Time
		finished := false
		for got < n || !finished {
			e, err := sub.next(time.Minute)
			if err != nil {
				sub.close()
				return 0, nil, "", fmt.Errorf("%s: waiting for message %d of %d and task.finished (%d events dropped for this subscriber): %w",
					phase, got+1, n, dropped, err)
			}
			switch e.Event {
			case "events.dropped":
				dropped++
			case "executor.paused":
				paused++
			case "executor.resumed":
				resumed++
			case "task.message":
				s := e.Data.Sequence
				if e.Data.TaskID == res.TaskID && s >= 1 && s <= int64(n) && !seen[s] {
					seen[s] = true
					got++
					last = e.at
				}
			case "task.finished":
				if e.Data.TaskID == res.TaskID {
					if got < n {
						sub.close()
						return 0, nil, "", fmt.Errorf("%s: task.finished after %d of %d messages", phase, got, n)
					}
					finished = true
				}
			}
		}
		return float64(n) / last.Sub(t0).Seconds(), sub, res.SessionID, nil
	}

	// best runs the flood phase tries times and returns its best rate.
	best := func(phase string) (float64, error) {
		var top float64
		for i := range tries {
			rate, sub, _, err := flood(fmt.Sprintf("%s (%d of %d)", phase, i+1, tries), nil)
			if err != nil {
				return 0, err
			}
			sub.close()
			top = max(top, rate)
		}
		return top, nil
	}

	// 1. One subscriber.
	rate, err := best("plain")
	if err != nil {
		return err
	}
	b.add(Row{Metric: fmt.Sprintf("report_message throughput, executor → daemon (store, publish) → subscriber (%d messages, best of %d)", n, tries),
		N: n, Orchestrd: fmt.Sprintf("%.0f msg/s", rate), Value: rate, Unit: "msg/s",
		Baseline: fmt.Sprintf("%.0f msg/s (NDJSON pipe between two processes, best of 3)", base), BaselineValue: &base,
		Ratio: fmt.Sprintf("%.0f%% of baseline", 100*rate/base), Target: "≥ 50% of baseline", Met: boolp(rate >= base/2)})

	// 2. With a stalled subscriber: a connection subscribed to every
	// task.message that never reads.
	stalledConn, err := net.Dial("unix", d.sock)
	if err != nil {
		return err
	}
	if _, err := stalledConn.Write([]byte(`{"id":1,"method":"events.subscribe","params":{"kinds":["task.message"]}}` + "\n")); err != nil {
		stalledConn.Close()
		return err
	}
	rate2, err := best("stalled")
	stalledConn.Close()
	if err != nil {
		return err
	}
	b.add(Row{Metric: "… with a stalled subscriber present", N: n, Orchestrd: fmt.Sprintf("%.0f msg/s", rate2), Value: rate2,
		Unit: "msg/s", Baseline: fmt.Sprintf("%.0f msg/s (no stalled subscriber, this run)", rate), BaselineValue: &rate,
		Ratio: fmt.Sprintf("%.0f%%", 100*rate2/rate), Target: "unchanged (≥ 80%)", Met: boolp(rate2 >= 0.8*rate)})

	// 3. The store locked from outside for 1.5 s during the flood.
	rss0, err := procRSS(d.pid())
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.tmp, "executors", "state.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	locked := make(chan error, 1)
	lock := func() {
		// The task is recorded; now another process takes the store's
		// write lock for 1.5 s while the executor floods.
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			locked <- err
			return
		}
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			conn.Close()
			locked <- err
			return
		}
		go func() {
			defer conn.Close()
			time.Sleep(1500 * time.Millisecond)
			_, err := conn.ExecContext(ctx, "ROLLBACK")
			locked <- err
		}()
	}
	var rssMax int64
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopRSS:
				return
			case <-t.C:
				if r, err := procRSS(d.pid()); err == nil && r > rssMax {
					rssMax = r
				}
			}
		}
	}()
	paused, resumed = 0, 0
	_, sub, session, err := flood("slow store", lock)
	close(stopRSS)
	<-rssDone
	if lerr := <-locked; lerr != nil && err == nil {
		err = fmt.Errorf("locking the store from outside: %w", lerr)
	}
	if err != nil {
		return err
	}
	// The resume may come after the last message.
	if resumed < paused {
		for resumed < paused {
			e, err := sub.next(10 * time.Second)
			if err != nil {
				break
			}
			if e.Event == "executor.resumed" {
				resumed++
			}
		}
	}
	sub.close()
	var sess struct {
		Messages []struct {
			Sequence int64 `json:"sequence"`
		} `json:"messages"`
	}
	if err := call(c, "session.get", map[string]any{"id": session}, &sess); err != nil {
		return fmt.Errorf("session.get: %w", err)
	}
	stored := map[int64]bool{}
	for _, m := range sess.Messages {
		stored[m.Sequence] = true
	}
	ok := paused > 0 && resumed > 0 && len(stored) == n
	b.add(Row{Metric: "… with the store locked 1.5 s: pauses / resumes, messages stored (of sent), RSS growth",
		N: n, Orchestrd: fmt.Sprintf("%d / %d, %d of %d, %s", paused, resumed, len(stored), n, signedBytes(rssMax-rss0)),
		Value: float64(len(stored)), Unit: "messages", Target: "switches, nothing lost, RSS flat", Met: boolp(ok)})

	// 4. Executor death -> task.finished {executor_lost} at a subscriber.
	// 200 deaths: with 50, the p99 was the second worst of them, and the
	// kernel's own teardown of a killed process (1.7 ms at the median on
	// this VM, for a Go process; 4 ms for python) has a tail of its own.
	trials := pick(b, 200, 10)
	// The subscriber reads the socket itself and stamps each line as it
	// reads it, as the flood's does: the general subscription's own
	// goroutine hop would be measured as the daemon's.
	dsub, err := d.floodSubscribe("task.finished", "executor.killed")
	if err != nil {
		return err
	}
	defer dsub.close()
	var ds, own []time.Duration
	for i := 0; i < trials; i++ {
		var res struct {
			TaskID string `json:"task_id"`
		}
		if err := call(c, "task.execute", api.TaskSpec{Executor: "bench", Prompt: `{"steps":[{"op":"hang"}]}`, Cwd: b.tmp}, &res); err != nil {
			return fmt.Errorf("task.execute (hang): %w", err)
		}
		pid, err := runningExecutorPid(c, res.TaskID)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing executor %d: %w", pid, err)
		}
		// task.finished, and the executor.killed {connection_closed} the
		// daemon emits as it acts on the closed socket (either may come
		// first): the earlier of their stamps is about when the daemon saw
		// the death. The time before it is the kernel tearing the process
		// down (and closing its socket), then the daemon's reader waking.
		var fin *floodEvent
		var seen time.Time
		for fin == nil || seen.IsZero() {
			wait := 30 * time.Second
			if fin != nil {
				wait = time.Second // executor.killed may not come (the exit reaped first)
			}
			e, err := dsub.next(wait)
			if err != nil && fin != nil {
				break
			}
			if err != nil {
				return fmt.Errorf("waiting for task.finished after the executor's SIGKILL: %w", err)
			}
			switch {
			case e.Event == "executor.killed" && e.Data.Pid == pid && e.Data.Reason == "connection_closed":
				seen = e.Data.TS
			case e.Event == "task.finished" && e.Data.TaskID == res.TaskID:
				fin = &e
				if e.Data.Error == nil || e.Data.Error.Code != api.TaskErrExecutorLost {
					return fmt.Errorf("task %s ended %s %+v after its executor was killed, want failed executor_lost", res.TaskID, e.Data.State, e.Data.Error)
				}
			}
		}
		// task.finished's data has no stamp of its own (ts is the log
		// line's): a trial without executor.killed has no such split.
		if ts := fin.Data.TS; !ts.IsZero() && (seen.IsZero() || ts.Before(seen)) {
			seen = ts
		}
		ds = append(ds, fin.at.Sub(t0))
		if !seen.IsZero() {
			own = append(own, max(0, fin.at.Sub(seen)))
		}
	}
	st := b.sample("executors.death_to_finished_ms", durationsMs(ds), "ms")
	ost := b.sample("executors.death_seen_to_finished_ms", durationsMs(own), "ms")
	b.add(Row{Metric: "p50 executor SIGKILL → task.finished {executor_lost} at a subscriber", N: st.N, Orchestrd: fmtMs(st.P50), Value: st.P50, Unit: "ms"})
	b.add(Row{Metric: "p99 executor SIGKILL → task.finished {executor_lost} at a subscriber (worst " + fmtMs(st.Max) + ")", N: st.N, Orchestrd: fmtMs(st.P99), Value: st.P99, Unit: "ms",
		Target: "≤ 5 ms", Met: boolp(st.P99 <= 5)})
	split := fmtMs(ost.P50) + " / " + fmtMs(ost.P99)
	if len(own) == 0 {
		split = "n/a (no executor.killed {connection_closed} came)"
	}
	b.add(Row{Metric: "… of which after the daemon's first event of the death (the time before it: the kernel's teardown, the reader waking) → at the subscriber, p50 / p99", N: ost.N,
		Orchestrd: split, Value: ost.P99, Unit: "ms"})
	return d.stop()
}

// runningExecutorPid waits until task runs and returns its executor's pid.
func runningExecutorPid(c interface {
	Call(ctx context.Context, method string, params, result any) error
}, taskID string) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var res struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Call(ctx, "executor.list", nil, &res)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("executor.list: %w", err)
		}
		for _, p := range res.Pools {
			for _, e := range p.Executors {
				if e.TaskID == taskID && e.Pid > 0 {
					return e.Pid, nil
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("task %s not running on any executor after 30 s", taskID)
}

// floodBaseline: n report_message lines from a flood process through a
// pipe, each decoded as JSON on this side; messages per second.
func floodBaseline(b *bench, n int) (float64, error) {
	var best float64
	for range 3 {
		cmd := exec.Command(b.flood, strconv.Itoa(n))
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("starting flood: %w", err)
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		got := 0
		for sc.Scan() {
			var m struct {
				Method string `json:"method"`
				Params struct {
					Sequence  int64           `json:"sequence"`
					EventData json.RawMessage `json:"event_data"`
				} `json:"params"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Method == "report_message" {
				got++
			}
		}
		elapsed := time.Since(t0)
		if err := cmd.Wait(); err != nil {
			return 0, fmt.Errorf("flood: %w", err)
		}
		if got != n {
			return 0, fmt.Errorf("flood baseline: %d of %d lines", got, n)
		}
		if r := float64(n) / elapsed.Seconds(); r > best {
			best = r
		}
	}
	return best, nil
}

// executorsConfig: one small lane and one executor pool running the
// scripted test executor, one warm instance.
func executorsConfig(testexec string) string {
	// A subscriber that keeps up on average may still trail a burst (the
	// messages of one commit are published at once): a deeper queue than
	// the default 1024 lines keeps the measure about throughput, not drops.
	return strings.Replace(laneConfig{runners: 1, slots: 1}.toml(), "[daemon]\n", "[daemon]\nsubscriber_queue = 65536\n", 1) +
		fmt.Sprintf("\n[executors.bench]\ncommand = [%q]\ninstances = 1\nmax_instances = 1\n", testexec) +
		// The death phase kills the executor 50 times in a row: a crash
		// loop by the default policy (10 in a minute), which would hold
		// the restarts back. It measures the loss, not the policy.
		"\n[executors.bench.restart]\nmax_r = 1000\nstable = \"1ms\"\n"
}

// signedBytes is a growth in bytes with its sign: "+340.0 KiB", "-504.0 KiB".
func signedBytes(n int64) string {
	if n < 0 {
		return "-" + fmtBytes(float64(-n))
	}
	return "+" + fmtBytes(float64(n))
}

// floodSub is the flood phases' subscriber: it reads the control socket
// itself and decodes each event line once, into the few fields it checks,
// as the baseline's reader decodes each of its lines once. (The general
// subscription decodes every event twice, once into a map: on two cores
// that reader's own work would be measured as the daemon's.)
type floodSub struct {
	conn net.Conn
	r    *bufio.Reader
}

// floodEvent is one event line as the flood subscriber decodes it.
type floodEvent struct {
	Event string `json:"event"`
	Data  struct {
		TaskID   string `json:"task_id"`
		Sequence int64  `json:"sequence"`
		// task.finished and executor.killed (the death phase)
		TS     time.Time      `json:"ts"`
		State  string         `json:"state"`
		Error  *api.TaskError `json:"error"`
		Pid    int            `json:"pid"`
		Reason string         `json:"reason"`
	} `json:"data"`
	at time.Time
}

func (d *daemon) floodSubscribe(kinds ...string) (*floodSub, error) {
	conn, err := net.Dial("unix", d.sock)
	if err != nil {
		return nil, err
	}
	req, _ := json.Marshal(map[string]any{"id": 1, "method": "events.subscribe", "params": map[string]any{"kinds": kinds}})
	if _, err := conn.Write(append(req, '\n')); err != nil {
		conn.Close()
		return nil, fmt.Errorf("events.subscribe: %w", err)
	}
	s := &floodSub{conn: conn, r: bufio.NewReaderSize(conn, 256<<10)}
	// The response comes before any event.
	line, err := s.line(10 * time.Second)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("events.subscribe: %w", err)
	}
	var res struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &res); err != nil || res.Error != nil {
		conn.Close()
		return nil, fmt.Errorf("events.subscribe: %s (%v)", line, err)
	}
	return s, nil
}

func (s *floodSub) close() { s.conn.Close() }

func (s *floodSub) line(timeout time.Duration) ([]byte, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(timeout))
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("an event line over %d bytes", s.r.Size())
	}
	return line, err
}

// next returns the next event, stamped when it was read.
func (s *floodSub) next(timeout time.Duration) (floodEvent, error) {
	line, err := s.line(timeout)
	if err != nil {
		return floodEvent{}, err
	}
	var e floodEvent
	if err := json.Unmarshal(line, &e); err != nil {
		return floodEvent{}, fmt.Errorf("event line %q: %w", line, err)
	}
	e.at = time.Now()
	return e, nil
}
