package uitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// lanesConfig is a small daemon's lanes and its HTTP listener on a free
// port of loopback.
const lanesConfig = `
[lanes.net]
runners = 1
slots = 4
network = "host"
[lanes.no-net]
runners = 1
slots = 2
network = "none"
[http]
listen = "127.0.0.1:0"
`

// config is what a test adds to a daemon's config file: keys of its
// [daemon] table, and more tables. {{home}} in either is the daemon's
// home.
type config struct {
	daemon string
	extra  string
	// secrets, when set, is the home's secrets.toml (keys of an agent).
	secrets string
	// files are copied into the home before the daemon starts: the name
	// there -> the file's path (a fleet node's cluster.creds).
	files map[string]string
	// samePort: the listener's port is chosen before the daemon starts,
	// so that a restart (daemon.restart) listens where the tab knows it.
	samePort bool
}

// daemon is one real daemon of a test, with its dashboard's address.
type daemon struct {
	t      *testing.T
	home   string
	cfg    config
	proc   *daemonrun.Daemon
	stderr *testio.SyncBuffer
	addr   string // 127.0.0.1:PORT of the HTTP listener
	base   string // http://127.0.0.1:PORT
	key    string // the API key: what signs in
	// runners are the pids of the runners it started with: none may
	// outlive it.
	runners []int
}

// startDaemon starts `orchestrd serve` on a new home with lanesConfig and
// cfg, waits until its lanes are ready and reads its HTTP
// address from its ready line and its key through the CLI. The daemon is
// stopped when the test ends.
func startDaemon(t *testing.T, cfg config) *daemon {
	t.Helper()
	needBrowser(t) // and so the binary
	home := testio.ShortTemp(t, "odui")
	if cfg.secrets != "" {
		if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte(cfg.secrets), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := "[daemon]\nshutdown_timeout = \"2s\"\n" + cfg.daemon + "\n" + lanesConfig + cfg.extra
	text = strings.ReplaceAll(text, "{{home}}", home)
	if cfg.samePort {
		text = strings.Replace(text, `listen = "127.0.0.1:0"`, `listen = "`+freeAddr(t)+`"`, 1)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, src := range cfg.files {
		if err := daemonrun.CopyFile(src, filepath.Join(home, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := &daemon{t: t, home: home, cfg: cfg}
	t.Cleanup(d.stop)
	d.launch()
	out, errOut, code := d.cli("http", "key")
	if code != 0 || len(strings.TrimSpace(out)) < 32 {
		t.Fatalf("orchestrd http key: exit %d: %q %s", code, out, errOut)
	}
	d.key = strings.TrimSpace(out)
	return d
}

// freeAddr is an address of loopback with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// launch starts `orchestrd serve` on d's home and waits until its lanes
// are ready; it reads the HTTP address from its ready line.
func (d *daemon) launch() {
	t := d.t
	t.Helper()
	d.stderr = &testio.SyncBuffer{}
	cmd := daemonrun.Serve(binary, d.home)
	cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
	p, err := daemonrun.Start(cmd, d.home)
	if err != nil {
		t.Fatal(err)
	}
	d.proc = p
	ls, err := p.WaitReady(60 * time.Second)
	if err != nil {
		t.Fatalf("daemon not ready: %v\n%s", err, tail(d.stderr.String(), 4000))
	}
	addr := d.readyHTTP()
	if d.addr != "" && addr != d.addr {
		t.Fatalf("the restarted daemon listens on %s, not %s", addr, d.addr)
	}
	d.addr = addr
	d.base = "http://" + d.addr
	for _, l := range ls {
		for _, r := range l.Runners {
			if r.Pid > 0 && r.Spawned {
				d.runners = append(d.runners, r.Pid)
			}
		}
	}
}

// restart stops d, cleanly (SIGTERM) or with SIGKILL (kill), and starts
// it again on its home; its runners must be gone first.
func (d *daemon) restart(kill bool) {
	d.t.Helper()
	if !d.cfg.samePort {
		d.t.Fatal("restart needs config.samePort: the tab would look for the daemon on another port")
	}
	if !kill {
		d.stop()
		d.launch()
		return
	}
	// What a killed daemon left (its runners) the next one ends.
	old := d.runners
	d.runners = nil
	if err := d.proc.Cmd.Process.Kill(); err != nil {
		d.t.Fatal(err)
	}
	<-d.proc.Done()
	d.launch()
	waitGone(d.t, old)
}

// readyHTTP is the http= address of the daemon's ready line (its log is
// JSON: {"http":"127.0.0.1:PORT",...,"message":"orchestrd ready"}).
func (d *daemon) readyHTTP() string {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, line := range strings.Split(d.stderr.String(), "\n") {
			var l struct {
				Message string `json:"message"`
				HTTP    string `json:"http"`
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Message != "orchestrd ready" {
				continue
			}
			if !strings.HasPrefix(l.HTTP, "127.0.0.1:") {
				d.t.Fatalf("the ready line's http is %q, want 127.0.0.1:PORT\n%s", l.HTTP, line)
			}
			return l.HTTP
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("no ready line after 30s\n%s", tail(d.stderr.String(), 4000))
		}
		select {
		case <-d.proc.Done():
			d.t.Fatalf("daemon exited: %v\n%s", d.proc.Err(), tail(d.stderr.String(), 4000))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (d *daemon) stop() {
	if d.proc == nil {
		return
	}
	if err := d.proc.Stop(30 * time.Second); err != nil {
		d.t.Errorf("%v\n%s", err, tail(d.stderr.String(), 60000))
	}
	waitGone(d.t, d.runners)
}

// waitGone fails t if one of pids (the daemon's runners) outlives it.
func waitGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		daemontest.WaitGone(t, pid)
	}
}

// cli runs the orchestrd CLI on d's home: its stdout, stderr and exit
// code.
func (d *daemon) cli(args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, append([]string{"--home", d.home}, args...)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		d.t.Fatalf("orchestrd %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		d.t.Fatalf("orchestrd %s did not end within 90s", strings.Join(args, " "))
	}
	return o.String(), e.String(), code
}

// job is a job's record as `orchestrd job --json ID` prints it.
func (d *daemon) job(id string) api.JobRecord {
	d.t.Helper()
	out, errOut, code := d.cli("job", "--json", id)
	if code != 0 {
		d.t.Fatalf("orchestrd job %s: exit %d: %s", id, code, errOut)
	}
	var rec api.JobRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.ID != id {
		d.t.Fatalf("orchestrd job --json %s: %v\n%s", id, err, out)
	}
	return rec
}

// events is the daemon's event log, each line decoded.
func (d *daemon) events() []map[string]any {
	d.t.Helper()
	evs, err := daemonrun.ReadEvents(daemonrun.EventLog(d.home))
	if err != nil {
		d.t.Fatal(err)
	}
	return evs
}

// waitEvent waits until the event log has a line of kind that match
// accepts (nil: any).
func (d *daemon) waitEvent(kind string, match func(map[string]any) bool) map[string]any {
	d.t.Helper()
	return daemontest.WaitEventAt(d.t, d.home, 60*time.Second, kind, match, nil)
}

// hasEvent reports whether the log has an event of kind naming job id.
func (d *daemon) hasEvent(kind, id string) bool {
	for _, e := range d.events() {
		if e["kind"] == kind && e["job_id"] == id {
			return true
		}
	}
	return false
}

// running is a CLI command running in the background (orchestrd run).
type running struct {
	cmd    *exec.Cmd
	lines  chan string // its stdout's lines
	stderr *testio.SyncBuffer
	done   chan struct{}
	err    error
}

// startCLI starts the CLI with args on d's home, in the background; it is
// killed, if still running, when the test ends.
func (d *daemon) startCLI(args ...string) *running {
	d.t.Helper()
	r := &running{lines: make(chan string, 1024), stderr: &testio.SyncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(binary, append([]string{"--home", d.home}, args...)...)
	r.cmd.Stderr = r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		d.t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case r.lines <- sc.Text():
			default: // nobody reads this far
			}
		}
		io.Copy(io.Discard, out)
	})
	go func() { wg.Wait(); r.err = r.cmd.Wait(); close(r.done) }()
	d.t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// runSleeper runs a job that sleeps ten minutes on lane, through
// `orchestrd run` in the background (startCLI): that run and the job's id.
func (d *daemon) runSleeper(lane string) (*running, string) {
	d.t.Helper()
	r := d.startCLI("run", "--lane", lane, "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"; exec sleep 600`)
	return r, r.line(d.t, "id=")
}

// line waits for the next stdout line that starts with prefix and
// returns the rest of it.
func (r *running) line(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l := <-r.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-r.done:
			select {
			case l := <-r.lines:
				if rest, ok := strings.CutPrefix(l, prefix); ok {
					return rest
				}
				continue
			default:
			}
			t.Fatalf("%s ended (%v) before printing %q\n%s", r.cmd, r.err, prefix, r.stderr.String())
		case <-timeout:
			t.Fatalf("%s printed no %q in 60s\n%s", r.cmd, prefix, r.stderr.String())
		}
	}
}

// stderrLine waits until the command's stderr has a line that starts
// with prefix, and returns the rest of it.
func (r *running) stderrLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, l := range strings.Split(r.stderr.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		}
		select {
		case <-r.done:
			t.Fatalf("%s ended (%v) before writing %q on stderr\n%s", r.cmd, r.err, prefix, r.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s wrote no %q on stderr in 60s\n%s", r.cmd, prefix, r.stderr.String())
		}
	}
}

// exit waits for the command's end and returns its exit code.
func (r *running) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not end within 90s\n%s", r.cmd, r.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	if r.err != nil {
		t.Fatalf("%s: %v", r.cmd, r.err)
	}
	return 0
}

// httpClient is a client of its own (its connections closed when the
// test ends) that follows no redirect: the tests look at each answer.
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
