package lanes

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/nodefigs"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// shared is what every lane, runner and job actor of one daemon reads. It
// is immutable after Start except for its atomic counters.
type shared struct {
	bus             *eventlog.Bus
	store           *store
	jobs            JobLog // the durable record; nil: memory only
	reaper          *proc.Reaper
	cgroup          *proc.Cgroup // the daemon's cgroup for its runners and their jobs; nil without cgroup v2
	hide            []string     // paths jobs must not see: the home
	sandbox         bool         // [daemon] sandbox: hide them
	log             zerolog.Logger
	exe             string
	exeFile         *os.File // exe, opened at start; runners are executed from it
	runnerStderr    io.Writer
	runnerEnv       []string // added to each spawned runner's clean environment
	maxFrame        uint32
	shutdownTimeout time.Duration
	gens            atomic.Int64

	restarts         atomic.Int64
	orphaned         atomic.Int64
	killedOnShutdown atomic.Int64
	submitted        atomic.Int64
	// room, when set (the fleet's), is called whenever a shared lane may
	// have room for another job; it must not block.
	room atomic.Pointer[func()]
	// secrets are looked up for jobs submitted with secrets (secrets.go).
	secrets Secrets
	// usage samples running jobs' process trees (usage.go).
	usage usageSampler
	// memAvail reads the node's available memory (min_free_memory); a
	// test swaps it.
	memAvail atomic.Pointer[func() (uint64, error)]
}

// Options configures a Manager.
type Options struct {
	Lanes map[string]LaneConfig
	// What lanes takes of the config file's [daemon] table.
	ShutdownTimeout time.Duration // a runner's drain before it is killed
	MaxFrameBytes   uint32        // runner protocol frames
	// The cache of recently finished records (with their output) holds
	// at most FinishedJobs of them and FinishedOutputBytes in all; older
	// ones are read from Jobs (without Jobs, they are gone).
	FinishedJobs        int
	FinishedOutputBytes int64
	Sandbox             bool   // hide the home from jobs (runnerSysProcAttr)
	Home                string // sockets live here: runner-<lane>.sock
	// Hide are more paths no job may see, reach or replace (with Sandbox):
	// vibe-reachout's hook socket.
	Hide []string
	// Exe is the binary spawned as `Exe runner --lane L --socket P --id ID`;
	// default os.Executable().
	Exe          string
	RunnerStderr io.Writer // where runners' logs go; default os.Stderr
	// RunnerEnv (KEY=VALUE) is added to the environment of every runner
	// the lanes spawn, which is otherwise proc.CleanEnv of the daemon's
	// with the lane's inherit_env: the runner's own settings (its log
	// format and level), never passed on to its jobs.
	RunnerEnv []string
	Bus       *eventlog.Bus
	System    *actors.System
	Logger    zerolog.Logger
	// Jobs is the durable record of jobs (the daemon's state store): a
	// job is acknowledged once recorded, its dispatch is recorded before
	// a runner gets it, its terminal record before anyone is told. nil
	// keeps jobs in memory only.
	Jobs JobLog
	// Secrets are the daemon's secrets.toml, from which a job submitted
	// with secrets gets their values at its dispatch; nil: none.
	Secrets Secrets
	// UsageSampleEvery is how often a running job's process tree is
	// sampled (usage.go); 0: never.
	UsageSampleEvery time.Duration
}

// Manager is the lanes supervisor and the API its methods (methods.go) call.
// Every method is non-blocking and safe from any goroutine.
type Manager struct {
	opts     Options
	sh       *shared
	sys      *actors.System
	root     actors.Ref
	lanes    map[string]*laneHandle
	names    []string
	idPre    string
	seq      atomic.Uint64
	stopped  sync.Once
	stopping atomic.Bool
	cl       atomic.Pointer[clusterBox] // the fleet; nil: one machine
}

// lanesSupervisor is the parent of the lane actors.
type lanesSupervisor struct {
	m     *Manager
	ready chan struct{}
}

func (s *lanesSupervisor) Receive(c *actors.Context) {
	switch c.Message().(type) {
	case actors.Started:
		for _, n := range s.m.names {
			h := s.m.lanes[n]
			ref, err := c.Spawn(actors.Props{Kind: "lane", ID: n, OnPanic: actors.Restart,
				MaxRestarts: 3, Within: time.Minute,
				New: func() actors.Actor { return &laneActor{sh: s.m.sh, h: h} }})
			if err != nil {
				panic(fmt.Errorf("spawning lane %s: %w", n, err))
			}
			h.ref.Store(&ref)
		}
		if s.ready != nil {
			close(s.ready)
			s.ready = nil
		}
	}
}

// Start makes the daemon the subreaper of its runners' jobs, starts the
// lanes supervisor and every lane, which spawn their runners.
func Start(opts Options) (*Manager, error) {
	if opts.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the orchestrd binary to spawn runners: %w", err)
		}
		opts.Exe = exe
	}
	if opts.RunnerStderr == nil {
		opts.RunnerStderr = os.Stderr
	}
	// A descriptor the daemon inherited by accident (whatever started it
	// held) must not reach a runner, and through it a job.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	// Runners are started from this descriptor, not from the path: a job
	// that replaces the file at the path must not choose what the daemon
	// runs next.
	exeFile, err := os.Open(opts.Exe)
	if err != nil {
		return nil, fmt.Errorf("opening the orchestrd binary to spawn runners: %w", err)
	}
	rp, err := proc.NewReaper(func(o proc.Orphan) { killOrphan(opts.Bus, o) })
	if err != nil {
		exeFile.Close()
		return nil, err
	}
	hide, err := hiddenPaths(opts.Home)
	if err != nil {
		rp.Stop()
		return nil, err
	}
	hide = append(hide, opts.Hide...)
	if !opts.Sandbox {
		opts.Logger.Warn().Msg("[daemon] sandbox = false: jobs can see the daemon's home and reach its sockets")
	}
	cg := runnersCgroup(opts.Logger)
	release := func() {
		exeFile.Close()
		rp.Stop()
		if cg != nil {
			_ = cg.Remove()
			cg.Close()
		}
	}
	m := &Manager{opts: opts, sys: opts.System, lanes: map[string]*laneHandle{},
		idPre: "j-" + api.RandomHex(3) + "-"}
	st := newStore(opts.FinishedJobs, opts.FinishedOutputBytes)
	m.sh = &shared{bus: opts.Bus, store: st, jobs: opts.Jobs, reaper: rp, cgroup: cg, hide: hide, sandbox: opts.Sandbox, log: opts.Logger, exeFile: exeFile,
		exe: opts.Exe, runnerStderr: opts.RunnerStderr, runnerEnv: opts.RunnerEnv, maxFrame: opts.MaxFrameBytes,
		shutdownTimeout: opts.ShutdownTimeout, secrets: opts.Secrets,
		usage: newUsageSampler(opts.UsageSampleEvery)}
	memAvail := nodefigs.MemAvailable
	m.sh.memAvail.Store(&memAvail)
	for n, lc := range opts.Lanes {
		m.lanes[n] = &laneHandle{name: n, cfg: lc, sh: m.sh, socket: filepath.Join(opts.Home, "runner-"+n+".sock")}
		m.names = append(m.names, n)
	}
	sort.Strings(m.names)
	// Every lane socket first: a path that cannot be listened on (too long,
	// not writable, served by another daemon) fails start-up, not a lane.
	for _, n := range m.names {
		h := m.lanes[n]
		ln, err := sockserve.Listen(h.socket, sockserve.ListenOptions{})
		if err != nil {
			for _, o := range m.names {
				if m.lanes[o].ln != nil {
					m.lanes[o].ln.Close()
				}
			}
			release()
			return nil, fmt.Errorf("lane %s: %w", n, err)
		}
		h.ln = ln
	}
	if err := writeJoinTokens(opts.Home, m.lanes); err != nil {
		for _, n := range m.names {
			m.lanes[n].ln.Close()
		}
		release()
		return nil, err
	}
	ready := make(chan struct{})
	first := true
	ref, err := opts.System.Spawn(actors.Props{Kind: "lanes", ID: "lanes", OnPanic: actors.Restart,
		New: func() actors.Actor {
			ls := &lanesSupervisor{m: m}
			if first {
				ls.ready, first = ready, false
			}
			return ls
		}})
	if err != nil {
		release()
		return nil, fmt.Errorf("starting the lanes supervisor: %w", err)
	}
	m.root = ref
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("starting the lanes supervisor: lanes not spawned after 10s")
	}
	return m, nil
}

// LaneNames lists the lanes, sorted.
func (m *Manager) LaneNames() []string { return append([]string(nil), m.names...) }

// Reaper is the daemon's subreaper: other domains spawn their processes
// with it (approvals' notify_command) so that their exits are reaped.
func (m *Manager) Reaper() *proc.Reaper { return m.sh.reaper }

// Submit validates a job, records it, queues it on its lane and returns
// its id; it waits for the record's commit (SubmitThen does not).
func (m *Manager) Submit(spec api.JobSpec) (string, error) {
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 1)
	m.SubmitThen(spec, func(id string, err error) { ch <- res{id, err} })
	r := <-ch
	return r.id, r.err
}

// SubmitThen validates a job and hands it to its lane, whose job actor
// records it; once the record is committed reply gets the job's id. reply
// runs exactly once, on any goroutine (at once for a refusal), and must
// not block. A job whose record could not be written is refused
// (CodeStoreUnavailable, state.write_failed, job.rejected) and gone from
// its lane before reply hears of it.
func (m *Manager) SubmitThen(spec api.JobSpec, reply func(id string, err error)) {
	m.submit(spec, "", func(id string, _ *OutputReader, err error) { reply(id, err) })
}

// SubmitReading is SubmitThen with a reader of the job's output attached
// before the job exists, so it gets every byte from the first (see
// OutputReader; who names the reader in job.stream_opened). reply gets the
// reader with the id; on a refusal there is none.
func (m *Manager) SubmitReading(spec api.JobSpec, who string, reply func(id string, r *OutputReader, err error)) {
	m.submit(spec, who, reply)
}

func (m *Manager) submit(spec api.JobSpec, who string, answer func(id string, r *OutputReader, err error)) {
	m.submitAs("", spec, who, answer)
}

// submitAs is submit; a job the fleet gave this node keeps its cluster id
// (id != ""), and runs here whatever its lane.
func (m *Manager) submitAs(id string, spec api.JobSpec, who string, answer func(id string, r *OutputReader, err error)) {
	reply := func(id string, err error) { answer(id, nil, err) }
	if m.stopping.Load() {
		reply("", api.Errorf(api.CodeShuttingDown, "daemon is stopping; job not accepted"))
		return
	}
	if spec.Lane == "" {
		spec.Lane = api.DefaultLane
	}
	h, ok := m.lanes[spec.Lane]
	c := m.cluster()
	if len(spec.Secrets) > 0 && (id != "" || c != nil && (ok && h.cfg.Shared || !ok && c.Serves(spec.Lane))) {
		// The fleet would carry the names to another node, whose secrets
		// they would take.
		reply("", api.Errorf(api.CodeInvalidParams, "lane %s is shared with the fleet: a job there cannot take secrets", spec.Lane))
		return
	}
	if c != nil && id == "" && (ok && h.cfg.Shared || !ok && c.Serves(spec.Lane)) {
		m.submitCluster(c, spec, who, answer)
		return
	}
	if !ok {
		reply("", api.Errorf(api.CodeNotFound, "unknown lane %q; the daemon's lanes are %s", spec.Lane, m.laneNames(c)))
		return
	}
	if e := checkSpec(&spec); e != nil {
		reply("", e)
		return
	}
	if e := checkSecrets(&spec, m.sh.secrets); e != nil {
		reply("", e)
		return
	}
	if spec.TimeoutMs == 0 {
		spec.TimeoutMs = h.cfg.TimeoutMs
	}
	if spec.KillGraceMs == nil {
		g := uint64(h.cfg.KillGrace.Milliseconds())
		spec.KillGraceMs = &g
	}
	if spec.MaxOutputBytes == 0 || spec.MaxOutputBytes > h.cfg.MaxOutputBytes {
		spec.MaxOutputBytes = h.cfg.MaxOutputBytes
	}
	if e := m.takeStdin(&spec); e != nil {
		reply("", e)
		return
	}
	if n := h.pending.Add(1); h.cfg.QueueLimit > 0 && n > int64(h.cfg.QueueLimit) {
		h.pending.Add(-1)
		m.sh.bus.Emit(JobRejected{Lane: spec.Lane, Reason: "queue_full"})
		reply("", &api.Error{Code: api.CodeQueueFull,
			Message: fmt.Sprintf("lane %s queue is full (%s waiting, queue_limit %d)", spec.Lane, api.Count(int(n-1), "job"), h.cfg.QueueLimit)})
		return
	}
	if id == "" {
		id = m.idPre + fmt.Sprint(m.seq.Add(1))
	}
	rec := api.JobRecord{ID: id, Lane: spec.Lane, State: api.StateQueued, Command: spec.Command, Argv: spec.Argv,
		Cwd: spec.Cwd, CreatedAt: time.Now()}
	out := newOutStream(m.sh, id, int(spec.MaxOutputBytes))
	var rd *OutputReader
	if who != "" {
		rd = out.attach(who, false)
		reply = func(id string, err error) {
			if err != nil {
				rd.close("", false)
				answer("", nil, err)
				return
			}
			m.sh.bus.Emit(JobStreamOpened{JobID: id, Reader: who, From: "start"})
			answer(id, rd, nil)
		}
	}
	m.sh.store.add(rec, out)
	if m.sh.jobs == nil {
		m.sh.submitted.Add(1)
		reply(id, nil)
		m.sys.Send(h.laneRef(), submitJob{rec: rec, spec: spec, out: out})
		return
	}
	// The job's actor records it before anything else it records (its
	// dispatch comes after, in the same write queue: a committed dispatch
	// means a committed submission) and answers once that is committed;
	// meanwhile the lane may already choose its runner, so the submission
	// and the dispatch share a commit when a slot is free.
	m.sys.Send(h.laneRef(), submitJob{rec: rec, spec: spec, reply: reply, out: out})
}

// Get returns a job's record: from memory while the job is live or in the
// cache of recently finished ones, else from the state store (a read
// error is logged and reads as not found; getMethod reports it).
func (m *Manager) Get(id string) (api.JobRecord, bool) {
	rec, ok, err := m.lookup(id)
	if err != nil {
		m.sh.log.Error().Err(err).Str("job_id", id).Msg("reading a job from the state store")
	}
	return rec, ok
}

// lookup is Get with the store's error. A job missing from memory is
// either unknown or finished, and then committed to the state store
// before it left the live jobs (store.finish): no moment has it in
// neither.
func (m *Manager) lookup(id string) (api.JobRecord, bool, error) {
	if c, ok := m.owned(id); ok {
		return c.Get(id) // the fleet's record is the one that counts
	}
	if rec, ok := m.sh.store.get(id); ok || m.sh.jobs == nil {
		return rec, ok, nil
	}
	return m.sh.jobs.Get(id)
}

// List returns matching jobs, oldest first, without their output (as
// ListPage without paging; a store error reads as no jobs).
func (m *Manager) List(f api.Filter) []api.JobRecord {
	jobs, _, err := m.ListPage(JobQuery{State: f.State, Lane: f.Lane})
	if err != nil {
		m.sh.log.Error().Err(err).Msg("listing jobs")
	}
	return jobs
}

// ListPage returns one page of matching jobs without their output: from
// the state store (every job it holds), or from memory without one. With
// a fleet, its jobs are merged in (listMerged).
func (m *Manager) ListPage(q JobQuery) ([]api.JobRecord, string, error) {
	if c := m.cluster(); c != nil {
		return m.listMerged(c, q)
	}
	if m.sh.jobs == nil {
		if q.Limit > 0 || q.Cursor != "" || !q.Since.IsZero() {
			return nil, "", api.Errorf(api.CodeInvalidParams, "invalid params for job.list: limit, cursor and since need the state store")
		}
		return m.sh.store.list(api.Filter{State: q.State, Lane: q.Lane}), "", nil
	}
	cur, err := parseListCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	if cur.localDone {
		return []api.JobRecord{}, "", nil // a merged cursor at the end of this node's jobs (the fleet since turned off)
	}
	q.Cursor = cur.local
	p, err := m.sh.jobs.List(q)
	if err != nil {
		return nil, "", api.Errorf(api.CodeInternal, "listing jobs: %v", err)
	}
	return p.Jobs, p.Next, nil
}

// clusterLane: jobs of lane go through the fleet.
func (m *Manager) clusterLane(c Cluster, lane string) bool {
	if h, ok := m.lanes[lane]; ok {
		return h.cfg.Shared
	}
	return c.Serves(lane)
}

// listMerged lists this node's own jobs (from its store, without its
// copies of the fleet's) and the fleet's (from the fleet's records, which
// count) as one list in q's order, paged across both: its cursor holds a
// place in each (listCursor).
func (m *Manager) listMerged(c Cluster, q JobQuery) ([]api.JobRecord, string, error) {
	cur, err := parseListCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	// Oldest first without a limit, newest first with one (job.list).
	before := func(a, b api.JobRecord) bool {
		if q.Newest {
			return a.CreatedAt.After(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID > b.ID
		}
		return a.CreatedAt.Before(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID < b.ID
	}
	var local JobPage
	switch {
	case cur.localDone || q.Lane != "" && m.clusterLane(c, q.Lane):
	case m.sh.jobs == nil:
		if q.Limit > 0 || q.Cursor != "" || !q.Since.IsZero() {
			return nil, "", api.Errorf(api.CodeInvalidParams, "invalid params for job.list: limit, cursor and since need the state store")
		}
		for _, j := range m.sh.store.list(api.Filter{State: q.State, Lane: q.Lane}) {
			if !c.Owns(j.ID) {
				local.Jobs = append(local.Jobs, j)
			}
		}
	default:
		lq := q
		lq.Cursor, lq.NotPrefix = cur.local, api.ClusterJobPrefix
		if local, err = m.sh.jobs.List(lq); err != nil {
			return nil, "", api.Errorf(api.CodeInternal, "listing jobs: %v", err)
		}
	}
	var fleet []api.JobRecord
	if !cur.fleetDone {
		fj, err := c.List(api.Filter{State: q.State, Lane: q.Lane})
		if err != nil {
			return nil, "", api.Errorf(api.CodeInternal, "listing the fleet's jobs: %v", err)
		}
		for _, j := range fj {
			if (q.Since.IsZero() || !j.CreatedAt.Before(q.Since)) && (cur.fleetAfter == nil || before(*cur.fleetAfter, j)) {
				fleet = append(fleet, j)
			}
		}
		sort.SliceStable(fleet, func(i, k int) bool { return before(fleet[i], fleet[k]) })
	}
	out := make([]api.JobRecord, 0, min(len(local.Jobs)+len(fleet), max(q.Limit, 0)))
	li, fi := 0, 0
	for (q.Limit == 0 || len(out) < q.Limit) && (li < len(local.Jobs) || fi < len(fleet)) {
		if li < len(local.Jobs) && (fi == len(fleet) || !before(fleet[fi], local.Jobs[li])) {
			out, li = append(out, local.Jobs[li]), li+1
		} else {
			out, fi = append(out, fleet[fi]), fi+1
		}
	}
	if q.Limit == 0 || li == len(local.Jobs) && local.Next == "" && fi == len(fleet) {
		return out, "", nil
	}
	next := cur
	switch {
	case li == len(local.Jobs) && local.Next == "":
		next.localDone = true
	case li > 0:
		next.local = local.After[li-1]
	}
	switch {
	case fi == len(fleet):
		next.fleetDone = true
	case fi > 0:
		next.fleetAfter = &fleet[fi-1]
	}
	return out, next.String(), nil
}

// listCursor is a place in a listing: after a job of this node's store
// (local, the store's own cursor; "" from the start) and after a job of
// the fleet's (fleetAfter; nil from the start), or at the end of either.
type listCursor struct {
	local                string
	localDone, fleetDone bool
	fleetAfter           *api.JobRecord // its CreatedAt and ID
}

// String is the cursor as job.list gives it: the store's cursor alone
// without a fleet, else "m<local>.<fleet>", each part empty from the
// start, "x" at the end, the fleet's "<created_at unix ns>_<id>".
func (c listCursor) String() string {
	var b strings.Builder
	b.WriteString("m")
	if c.localDone {
		b.WriteString("x")
	} else {
		b.WriteString(c.local)
	}
	b.WriteString(".")
	switch {
	case c.fleetDone:
		b.WriteString("x")
	case c.fleetAfter != nil:
		b.WriteString(strconv.FormatInt(c.fleetAfter.CreatedAt.UnixNano(), 10))
		b.WriteString("_")
		b.WriteString(c.fleetAfter.ID)
	}
	return b.String()
}

// parseListCursor reads a cursor job.list gave: the store's own (digits),
// or a merged one (listCursor.String).
func parseListCursor(s string) (listCursor, error) {
	bad := api.Errorf(api.CodeInvalidParams, "invalid params for job.list: cursor %q is not one job.list gave (pass its next_cursor)", s)
	digits := func(s string) bool {
		n, err := strconv.ParseInt(s, 10, 64)
		return err == nil && n >= 1 && strconv.FormatInt(n, 10) == s
	}
	var c listCursor
	if s == "" {
		return c, nil
	}
	if digits(s) {
		c.local = s
		return c, nil
	}
	rest, ok := strings.CutPrefix(s, "m")
	local, fleet, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return c, bad
	}
	switch {
	case local == "x":
		c.localDone = true
	case local == "" || digits(local):
		c.local = local
	default:
		return c, bad
	}
	switch {
	case fleet == "x":
		c.fleetDone = true
	case fleet == "":
	default:
		ns, id, ok := strings.Cut(fleet, "_")
		n, err := strconv.ParseInt(ns, 10, 64)
		if !ok || err != nil || strconv.FormatInt(n, 10) != ns || !strings.HasPrefix(id, api.ClusterJobPrefix) || len(id) > 64 {
			return c, bad
		}
		c.fleetAfter = &api.JobRecord{ID: id, CreatedAt: time.Unix(0, n).UTC()}
	}
	if c.localDone && c.fleetDone {
		return c, bad
	}
	return c, nil
}

// Cancel cancels a queued or running job; reply runs once, on any goroutine.
// A running job gets SIGTERM, and SIGKILL after its kill grace; a second
// cancel kills it at once.
func (m *Manager) Cancel(id string, reply func(wasRunning bool, err error)) {
	m.CancelWith(id, false, reply)
}

// CancelWith is Cancel; force kills a running job at once, without its
// kill grace.
func (m *Manager) CancelWith(id string, force bool, reply func(wasRunning bool, err error)) {
	if c, ok := m.owned(id); ok {
		c.Cancel(id, force, reply)
		return
	}
	rec, ok, err := m.lookup(id)
	if err != nil {
		reply(false, api.Errorf(api.CodeInternal, "reading job %s: %v", id, err))
		return
	}
	if !ok {
		reply(false, api.Errorf(api.CodeNotFound, "no job %q", id))
		return
	}
	m.cancelLive(rec, force, reply)
}

// cancelLive cancels the job of rec through its lane, if it is live here.
func (m *Manager) cancelLive(rec api.JobRecord, force bool, reply func(wasRunning bool, err error)) {
	id := rec.ID
	if rec.State.Terminal() {
		reply(false, api.Errorf(api.CodeInvalidState, "job %s already finished (%s)", id, rec.State))
		return
	}
	h, live := m.lanes[rec.Lane]
	if _, inMem := m.sh.store.get(id); !live || !inMem {
		reply(false, api.Errorf(api.CodeInvalidState, "job %s is recorded as %s but is not live in this daemon", id, rec.State))
		return
	}
	var once sync.Once
	m.sys.Send(h.laneRef(), cancelJob{id: id, force: force, reply: func(w bool, e error) {
		once.Do(func() { reply(w, e) })
	}})
}

// Wait calls fn once the job is terminal: at once for a job that already
// is (in memory, or only in the state store).
func (m *Manager) Wait(id string, fn func(api.JobRecord)) (func(), error) {
	if c, ok := m.owned(id); ok {
		return c.Wait(id, fn)
	}
	cancel, ok := m.sh.store.wait(id, fn)
	if ok {
		return cancel, nil
	}
	rec, found, err := m.lookup(id)
	switch {
	case err != nil:
		return nil, api.Errorf(api.CodeInternal, "reading job %s: %v", id, err)
	case !found:
		return nil, api.Errorf(api.CodeNotFound, "no job %q", id)
	case !rec.State.Terminal():
		return nil, api.Errorf(api.CodeInvalidState, "job %s is recorded as %s but is not live in this daemon", id, rec.State)
	}
	fn(rec)
	return func() {}, nil
}

// Lanes returns every lane's status.
func (m *Manager) Lanes() []api.LaneStatus {
	out := make([]api.LaneStatus, 0, len(m.names))
	for _, n := range m.names {
		h := m.lanes[n]
		if st := h.status.Load(); st != nil {
			cp := *st
			cp.Queued, cp.Running = int(h.pending.Load()), int(h.running.Load())
			out = append(out, cp)
		} else {
			out = append(out, api.LaneStatus{Name: n, Network: h.cfg.Network, Slots: h.cfg.Slots,
				QueueLimit: h.cfg.QueueLimit, Runners: []api.RunnerStatus{}})
		}
	}
	return out
}

// Metrics returns the lanes' job and runner counters.
func (m *Manager) Metrics() api.LaneMetrics {
	mt := api.LaneMetrics{JobsByState: m.sh.store.stateCounts(), JobsSubmitted: m.sh.submitted.Load(),
		RunnerRestarts: m.sh.restarts.Load(), OrphanedJobs: m.sh.orphaned.Load(), RunnersByLane: map[string]int64{}}
	for _, l := range m.Lanes() {
		var n int64
		for _, r := range l.Runners {
			if r.State == "ready" {
				n++
			}
		}
		mt.RunnersByLane[l.Name] = n
	}
	return mt
}

// FinishedOutputBytes is what the cache of finished records holds now,
// their output included, at most [daemon] finished_output_bytes.
func (m *Manager) FinishedOutputBytes() int64 { return m.sh.store.finishedOutput() }

// Shutdown stops the lanes: queued jobs end cancelled, runners get
// Shutdown and, past the shutdown timeout, SIGKILL on their process group;
// running jobs end cancelled (daemon_shutdown). Then the actors stop and a
// last sweep kills anything re-parented to the daemon. It returns how many
// runners had to be killed.
// Force hurries a Shutdown under way, or the one to come (the daemon
// stops other domains before the lanes, and a second signal may come
// meanwhile): runners that have not stopped yet are killed now
// (runner.killed {reason: shutdown_forced}) instead of at the shutdown
// timeout; their jobs end cancelled as at any shutdown. Call it only once
// the daemon is stopping.
func (m *Manager) Force() {
	for _, n := range m.names {
		m.sys.Send(m.lanes[n].laneRef(), laneForce{})
	}
}

func (m *Manager) Shutdown(ctx context.Context) (int, error) {
	var err error
	m.stopped.Do(func() {
		m.stopping.Store(true)
		var wg sync.WaitGroup
		for _, n := range m.names {
			wg.Add(1)
			var once sync.Once
			m.sys.Send(m.lanes[n].laneRef(), laneShutdown{done: func() { once.Do(wg.Done) }})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("waiting for lanes to stop: %w", ctx.Err())
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if serr := m.sys.Stop(sctx, m.root); serr != nil && err == nil {
			err = serr
		}
		for _, n := range m.names {
			m.lanes[n].closeListener()
		}
		m.sh.reaper.Stop()
		m.sh.exeFile.Close()
		if cg := m.sh.cgroup; cg != nil {
			if err := cg.Remove(); err != nil {
				m.opts.Logger.Warn().Err(err).Msg("removing the runners' cgroup")
			}
			cg.Close()
		}
	})
	return int(m.sh.killedOnShutdown.Load()), err
}
