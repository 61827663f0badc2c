// Command orchbench measures orchestrd against baselines measured in the same
// run on the same machine: runner restart (against a bare fork/exec floor and
// whichever of s6, runit, daemontools and supervisord are installed), orphan
// notice, job throughput and latency, control-socket round trips, fan-out with
// a stalled subscriber, memory at scale and idle cost. It builds what it
// needs, starts real daemons in temporary homes and prints a markdown table.
//
//	go run ./cmd/orchbench                  # full run, a few minutes
//	go run ./cmd/orchbench --quick          # smoke test, about 1.5 min idle; timings not judged
//	go run ./cmd/orchbench --json out.json  # also write the report as JSON
//
// Exit status: 0 when the harness ran (in quick mode whatever the timings; in
// a full run when every target was met), 3 for a full run that missed a
// target, 1 when the harness itself failed (a build, a daemon, a scenario).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
)

// scenario is one numbered scenario of the issue.
type scenario struct {
	id    string
	title string
	run   func(b *bench) error
}

var scenarios = []scenario{
	{"restart", "1. Runner restart", runRestart},
	{"orphan", "2. Orphan notice", runOrphan},
	{"jobs", "3. Jobs", runJobs},
	{"control", "4. Control socket ping", runControl},
	{"fanout", "5. Fan-out, stalled subscriber", runFanout},
	{"scale", "6. Scale", runScale},
	{"idle", "7. Idle cost", runIdle},
	{"store", "8. State store", runStore},
	{"approvals", "9. Approvals", runApprovals},
	{"executors", "10. Executors", runExecutors},
	{"clanker", "11. clanker pod IPC", runClanker},
	{"http", "12. Loopsy HTTP API", runHTTP},
	{"streams", "13. Job output streams", runStreams},
	{"loops", "14. Loops", runLoops},
	{"dashboard", "15. Dashboard", runDashboard},
	{"metrics", "16. Prometheus metrics", runMetrics},
	{"fleet", "17. Fleet", runFleet},
	{"sampling", "18. Job usage sampling", runSampling},
}

// bench is the state of one harness run.
type bench struct {
	quick    bool
	verbose  bool
	tmp      string // everything the run creates lives here
	bin      string // the orchestrd binary
	hello    string // the hello program (restart baselines)
	echo     string // the NDJSON echo server (control baseline)
	flood    string // report_message lines into a pipe (executor baseline)
	testexec string // the scripted test executor (internal/testexecutor)
	log      io.Writer
	rep      *Report
	title    string // current scenario's title
	profiles string // when set, each daemon writes its CPU profile here (--cpuprofile)

	mu   sync.Mutex
	live map[*daemon]bool // the daemons started and not yet stopped
}

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orchbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "run each scenario briefly (about 1.5 minutes in all on an idle 2-core machine); timings are not judged")
	jsonPath := fs.String("json", "", "also write the report as JSON to this file")
	bin := fs.String("bin", "", "use this orchestrd binary instead of building ./cmd/orchestrd")
	only := fs.String("only", "", "comma-separated scenarios to run: "+scenarioIDs())
	keep := fs.Bool("keep", false, "keep the temporary directory (daemon homes and logs)")
	verbose := fs.Bool("v", false, "log progress in detail on stderr")
	profiles := fs.String("cpuprofile", "", "each daemon writes a CPU profile of its run to `DIR`/NAME.pprof (serve --cpuprofile)")
	limit := fs.Duration("scenario-timeout", 0, "a scenario still running after this fails the run, its processes' stacks "+
		"in their logs (default 20m, 5m with --quick)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: orchbench [--quick] [--json FILE] [--bin ORCHESTRD] [--only LIST] [--keep] [--cpuprofile DIR]"+
			" [--scenario-timeout D] [-v]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	want := map[string]bool{}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			s = strings.TrimSpace(s)
			if !validScenario(s) {
				fmt.Fprintf(stderr, "orchbench: unknown scenario %q (have %s)\n", s, scenarioIDs())
				return 2
			}
			want[s] = true
		}
	}

	started := time.Now()
	mode := "full"
	if *quick {
		mode = "quick"
	}
	rep := &Report{Env: machineEnv(mode), Samples: map[string]Stats{}}
	tmp, err := daemonrun.ShortTempDir("orchbench-")
	if err != nil {
		fmt.Fprintf(stderr, "orchbench: %v\n", err)
		return 1
	}
	if *keep {
		fmt.Fprintf(stderr, "orchbench: keeping %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	b := &bench{quick: *quick, verbose: *verbose, tmp: tmp, log: stderr, rep: rep, profiles: *profiles,
		live: map[*daemon]bool{}}
	if *limit <= 0 {
		*limit = 20 * time.Minute
		if *quick {
			*limit = 5 * time.Minute
		}
	}
	if b.profiles != "" {
		if err := os.MkdirAll(b.profiles, 0o700); err != nil {
			fmt.Fprintf(stderr, "orchbench: --cpuprofile: %v\n", err)
			return 2
		}
	}

	if err := raiseNofile(); err != nil {
		b.logf("could not raise the open-files limit: %v (scenario 6 may fail)", err)
	}
	if err := b.build(*bin); err != nil {
		fmt.Fprintf(stderr, "orchbench: %v\n", err)
		return 1
	}

	failed := false
	for _, sc := range scenarios {
		if len(want) > 0 && !want[sc.id] {
			continue
		}
		b.title = sc.title
		b.logf("== %s", sc.title)
		t := time.Now()
		over := time.AfterFunc(*limit, func() { b.hung(sc.title, *limit) })
		err := sc.run(b)
		if !over.Stop() {
			select {} // too late: hung is ending the run
		}
		if err != nil {
			failed = true
			msg := fmt.Sprintf("%s: %v", sc.title, err)
			rep.Errors = append(rep.Errors, msg)
			b.logf("FAILED %s", msg)
		}
		b.logf("   %s took %.1f s", sc.title, time.Since(t).Seconds())
	}

	rep.Env.LoadEnd = loadavg()
	rep.Env.Seconds = time.Since(started).Seconds()
	if err := rep.WriteMarkdown(stdout); err != nil {
		fmt.Fprintf(stderr, "orchbench: %v\n", err)
		return 1
	}
	if *jsonPath != "" {
		if err := rep.WriteJSON(*jsonPath); err != nil {
			fmt.Fprintf(stderr, "orchbench: writing %s: %v\n", *jsonPath, err)
			return 1
		}
	}
	switch {
	case failed:
		return 1
	case !*quick && missedAny(rep.Rows):
		return 3
	}
	return 0
}

func scenarioIDs() string {
	ids := make([]string, len(scenarios))
	for i, s := range scenarios {
		ids[i] = s.id
	}
	return strings.Join(ids, ",")
}

func validScenario(id string) bool {
	for _, s := range scenarios {
		if s.id == id {
			return true
		}
	}
	return false
}

func missedAny(rows []Row) bool {
	for _, r := range rows {
		if r.Met != nil && !*r.Met {
			return true
		}
	}
	return false
}

// hung ends a run whose scenario is still running after limit: a hang
// says which scenario it was and leaves its stacks behind rather than eat
// the time of whoever runs the benchmark (CI). Each daemon still up gets
// SIGQUIT (Go's goroutine dump, into its log, which is kept), the
// harness's own goroutines go to stderr, and the run exits 4. (A runner
// absorbs every signal it could get from a job, SIGQUIT too: its stacks
// are not dumped.) The daemons and their runners die with the harness.
func (b *bench) hung(title string, limit time.Duration) {
	b.mu.Lock()
	var ds []*daemon
	for d := range b.live {
		ds = append(ds, d)
	}
	b.mu.Unlock()
	b.logf("FAILED %s: still running after %s; the stacks of its daemons are in their logs, kept in %s",
		title, limit, b.tmp)
	for _, d := range ds {
		_ = syscall.Kill(d.pid(), syscall.SIGQUIT)
		b.logf("   daemon %s (pid %d): %s", d.name, d.pid(), d.logf.Name())
	}
	time.Sleep(2 * time.Second) // the dumps into the logs
	b.logf("the harness's goroutines:")
	_ = pprof.Lookup("goroutine").WriteTo(b.log, 1)
	os.Exit(4)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "orchbench: "+format+"\n", args...)
}

func (b *bench) debugf(format string, args ...any) {
	if b.verbose {
		b.logf(format, args...)
	}
}

// add appends a row to the report under the current scenario.
func (b *bench) add(r Row) {
	if r.Scenario == "" {
		r.Scenario = b.title
	}
	b.rep.Rows = append(b.rep.Rows, r)
}

// last is the row added most recently.
func (b *bench) last() *Row { return &b.rep.Rows[len(b.rep.Rows)-1] }

// sample records a summarised series in the JSON report and returns it.
func (b *bench) sample(name string, xs []float64, unit string) Stats {
	st := summarize(xs, unit)
	b.rep.Samples[name] = st
	return st
}

// pairStats are a paired comparison's samples: each side's rates and round
// trips, and the ratios of the paired trials' rates.
type pairStats struct{ rate, baseRate, ratio, rtt, baseRtt Stats }

// pairSamples records a paired comparison under prefix: orchestrd's rates
// (in unit) as prefix+rate, the baseline's as prefix+baseRate, the paired
// ratios as prefix+"ratio", and the round trips (ms) as prefix+rtt and
// prefix+baseRtt.
func (b *bench) pairSamples(prefix, unit string, o, base []measured, rate, baseRate, rtt, baseRtt string) pairStats {
	return pairStats{
		rate:     b.sample(prefix+rate, rates(o), unit),
		baseRate: b.sample(prefix+baseRate, rates(base), unit),
		ratio:    b.sample(prefix+"ratio", pairRatios(o, base), "ratio"),
		rtt:      b.sample(prefix+rtt, durationsMs(latencies(o)), "ms"),
		baseRtt:  b.sample(prefix+baseRtt, durationsMs(latencies(base)), "ms"),
	}
}

func (b *bench) note(format string, args ...any) {
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf(format, args...))
}

// pick returns full or quick by mode.
func pick[T any](b *bench, full, quick T) T {
	if b.quick {
		return quick
	}
	return full
}

// quickLoad is how long a closed-loop trial or warm-up runs in a quick
// run: every worker still completes operations (a quick run checks the
// harness, not the timings), and it is short because each one keeps every
// core busy for as long as it runs.
const quickLoad = 100 * time.Millisecond

// load is the duration of a closed-loop trial or warm-up: full, or
// quickLoad in a quick run.
func (b *bench) load(full time.Duration) time.Duration { return pick(b, full, quickLoad) }

// moduleRoot finds the orchestrd module's directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the orchestrd module (run from the repository)")
	}
	return filepath.Dir(mod), nil
}

// build compiles the daemon (unless a binary was given) and the baseline
// programs into the run's temporary directory.
func (b *bench) build(prebuilt string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(b.tmp, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	targets := []struct {
		pkg string
		out *string
	}{
		{"./cmd/orchbench/internal/hello", &b.hello},
		{"./cmd/orchbench/internal/echo", &b.echo},
		{"./cmd/orchbench/internal/flood", &b.flood},
		{"./internal/testexecutor", &b.testexec},
	}
	if prebuilt != "" {
		p, err := filepath.Abs(prebuilt)
		if err != nil {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("--bin: %w", err)
		}
		b.bin = p
	} else {
		targets = append(targets, struct {
			pkg string
			out *string
		}{"./cmd/orchestrd", &b.bin})
	}
	for _, t := range targets {
		out := filepath.Join(dir, filepath.Base(t.pkg))
		b.logf("building %s", t.pkg)
		if err := daemonrun.Build(root, t.pkg, out); err != nil {
			return err
		}
		*t.out = out
	}
	return nil
}

// raiseNofile raises this process's open-files limit to its hard limit
// (and the hard limit too, where allowed): scenario 6 holds 10,000
// connections, and the daemon inherits the limit.
func raiseNofile() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	const want = 1 << 16
	if lim.Max < want {
		l := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l) == nil {
			return nil
		}
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

func nofile() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}

// machineEnv describes the machine.
func machineEnv(mode string) Env {
	e := Env{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Mode: mode, Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadStart: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			e.MemMiB = kb / 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		e.Commit = strings.TrimSpace(string(out))
	}
	return e
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
