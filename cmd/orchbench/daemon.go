package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
)

// daemon is one `orchestrd serve` process in its own temporary home.
type daemon struct {
	run  *daemonrun.Daemon
	b    *bench
	name string
	sock string
	logf *os.File
}

// startDaemon writes config (TOML; "" = the embedded defaults) into a fresh
// home, starts the daemon and waits until every lane's runners are ready.
func (b *bench) startDaemon(name, config string) (*daemon, error) {
	d, err := b.launchDaemon(name, config)
	if err != nil {
		return nil, err
	}
	return d, d.waitReady()
}

// startDialed is startDaemon with a control-socket connection open to it;
// the caller closes the connection and stops the daemon.
func (b *bench) startDialed(name, config string) (*daemon, *client.Client, error) {
	d, err := b.startDaemon(name, config)
	if err != nil {
		return nil, nil, err
	}
	c, err := d.dial()
	if err != nil {
		d.stop()
		return nil, nil, err
	}
	return d, c, nil
}

// launchDaemon is startDaemon without the wait: daemons that need each
// other to be ready (a fleet) start together, then each is waited for.
func (b *bench) launchDaemon(name, config string) (*daemon, error) {
	home := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	var args []string
	if config != "" {
		// Not the person's own daemon's port (a daemon that found it
		// taken would measure one without its HTTP API).
		config = daemonrun.OwnHTTPPort(config)
		path := filepath.Join(home, "orchbench.toml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--config", path)
	}
	if b.profiles != "" {
		prof := filepath.Join(b.profiles, name+".pprof")
		_ = os.Remove(prof) // serve refuses to overwrite
		args = append(args, "--cpuprofile", prof)
	}
	logf, err := os.Create(filepath.Join(b.tmp, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := daemonrun.Serve(b.bin, home, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// daemonrun.Start has the daemon die with the harness; its runners die with it.
	p, err := daemonrun.Start(cmd, home)
	if err != nil {
		logf.Close()
		return nil, err
	}
	d := &daemon{run: p, b: b, name: name, sock: p.Socket(), logf: logf}
	b.mu.Lock()
	b.live[d] = true
	b.mu.Unlock()
	return d, nil
}

// waitReady waits until every lane's runners are ready; a daemon that is
// not is stopped.
func (d *daemon) waitReady() error {
	if _, err := d.run.WaitReady(60 * time.Second); err != nil {
		d.stop()
		return fmt.Errorf("daemon %s: %w\n%s", d.name, err, d.logTail())
	}
	d.b.debugf("daemon %s up, pid %d", d.name, d.pid())
	return nil
}

func (d *daemon) pid() int { return d.run.Pid() }

// laneInfo is the part of lane.list the harness reads (decoded here rather
// than into api.LaneStatus so that the harness also reads daemons with
// fewer fields).
type laneInfo struct {
	Name    string       `json:"name"`
	Spares  int          `json:"spares"`
	Queued  int          `json:"queued"`
	Running int          `json:"running"`
	Runners []runnerInfo `json:"runners"`
}

type runnerInfo struct {
	ID      string `json:"id"`
	Pid     int    `json:"pid"`
	State   string `json:"state"`
	Spawned bool   `json:"spawned"`
	Spare   bool   `json:"spare"`
}

// stop sends SIGTERM and waits (then SIGQUIT, for the goroutines' stacks
// in its log, and SIGKILL). It reports a daemon that did not stop cleanly.
func (d *daemon) stop() error {
	defer d.logf.Close()
	defer func() {
		d.b.mu.Lock()
		delete(d.b.live, d)
		d.b.mu.Unlock()
	}()
	if err := d.run.Stop(20 * time.Second); err != nil {
		return fmt.Errorf("daemon %s did not stop within 20s of SIGTERM", d.name)
	}
	if err := d.run.Err(); err != nil {
		return fmt.Errorf("daemon %s: %v\n%s", d.name, err, d.logTail())
	}
	return nil
}

// logTail returns the last lines of the daemon's log, for errors.
func (d *daemon) logTail() string {
	b, err := os.ReadFile(d.logf.Name())
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

func (d *daemon) dial() (*client.Client, error) { return client.Dial(d.sock) }

// startHTTP is startDaemon for a config that serves the HTTP API: also
// where it listens (http.info on the control socket) and the key it wrote
// to its home, what the HTTP, dashboard, metrics and stream scenarios call
// it with. The caller stops the daemon.
func (b *bench) startHTTP(name, config string) (d *daemon, addr, key string, err error) {
	d, err = b.startDaemon(name, config)
	if err != nil {
		return nil, "", "", err
	}
	ctl, err := d.dial()
	if err == nil {
		var info struct {
			Addr string `json:"addr"`
		}
		err = call(ctl, "http.info", nil, &info)
		ctl.Close()
		if err != nil {
			err = fmt.Errorf("http.info: %w", err)
		}
		addr = info.Addr
	}
	var keyb []byte
	if err == nil {
		keyb, err = os.ReadFile(filepath.Join(d.run.Home, "http.key"))
	}
	if err != nil {
		d.stop()
		return nil, "", "", err
	}
	return d, addr, strings.TrimSpace(string(keyb)), nil
}

func laneList(c *client.Client) ([]laneInfo, error) {
	var res struct {
		Lanes []laneInfo `json:"lanes"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Call(ctx, "lane.list", nil, &res); err != nil {
		return nil, fmt.Errorf("lane.list: %w", err)
	}
	return res.Lanes, nil
}

func call(c *client.Client, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Call(ctx, method, params, result)
}

// ---- pushed events ----

// event is one pushed control-socket event, stamped on arrival with the
// monotonic clock.
type event struct {
	at   time.Time
	kind string
	data evData
	raw  json.RawMessage
}

// evData holds the fields the scenarios look at, from any event kind.
type evData struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	JobID    string `json:"job_id"`
	TaskID   string `json:"task_id"`
	Spare    bool   `json:"spare"`
	Job      *struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Error string `json:"error"`
	} `json:"job"`
}

// subscription is a control connection subscribed to some event kinds.
type subscription struct {
	c  *client.Client
	ch chan event
}

// subscribe dials the daemon and subscribes to kinds. Events are stamped by
// a goroutine that does nothing else, as soon as the client hands them over.
func (d *daemon) subscribe(kinds ...string) (*subscription, error) {
	c, err := d.dial()
	if err != nil {
		return nil, err
	}
	if err := call(c, "events.subscribe", map[string]any{"kinds": kinds}, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("events.subscribe: %w", err)
	}
	s := &subscription{c: c, ch: make(chan event, 4096)}
	go func() {
		defer close(s.ch)
		for ev := range c.Events() {
			e := event{at: time.Now(), kind: ev.Event, raw: ev.Data}
			_ = json.Unmarshal(ev.Data, &e.data)
			s.ch <- e
		}
	}()
	return s, nil
}

func (s *subscription) close() { s.c.Close() }

// drain discards events already received.
func (s *subscription) drain() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}

// wait returns the first event (in arrival order) for which match is true,
// discarding the others.
func (s *subscription) wait(timeout time.Duration, what string, match func(event) bool) (event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e, ok := <-s.ch:
			if !ok {
				return event{}, fmt.Errorf("waiting for %s: connection closed", what)
			}
			if match(e) {
				return e, nil
			}
		case <-t.C:
			return event{}, fmt.Errorf("waiting for %s: nothing after %s", what, timeout)
		}
	}
}

// ---- /proc ----

// procRSS returns a process's resident set size in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns a process's user+system CPU time (all its threads).
func procCPU(pid int) (time.Duration, error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	// Fields after "(comm)": state is [0]; utime is field 14 of the whole
	// line, so [11]; stime [12].
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad stat")
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procCPUPrecise returns a process's CPU time with nanosecond resolution:
// the sum of its threads' /proc/PID/task/TID/schedstat run times. Threads
// that exited are not counted, so it suits idle processes; it falls back to
// procCPU where schedstat is missing.
func procCPUPrecise(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			if os.IsNotExist(err) && len(tasks) > 0 && t.Name() == strconv.Itoa(pid) {
				return procCPU(pid)
			}
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// procStatFields returns the fields of /proc/PID/stat after the command name.
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, errors.New("bad stat")
	}
	return strings.Fields(string(b[i+2:])), nil
}

// children lists the direct children of pid.
func children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStatFields(p)
		if err != nil || len(f) < 2 {
			continue
		}
		if pp, _ := strconv.Atoi(f[1]); pp == pid {
			out = append(out, p)
		}
	}
	return out
}

// procNofile returns the soft open-files limit of a process.
func procNofile(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			f := strings.Fields(l)
			if len(f) >= 4 {
				return f[3]
			}
		}
	}
	return "?"
}
