package fleet

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// A test fleet: embedded NATS servers clustered by routes on 127.0.0.1,
// one Fleet each, a fake Local each.

const testWait = 3 * time.Minute // a cluster forming under -race beside the whole suite took over a minute in CI

// testHeartbeat: three servers in one process under the race detector
// on a shared machine stall for a second at times.
const testHeartbeat = 2 * time.Second

// runs counts every Run of every job id across the fake nodes of a test.
type runs struct {
	mu sync.Mutex
	n  map[string]int
	on map[string]string // id -> node
}

func newRuns() *runs { return &runs{n: map[string]int{}, on: map[string]string{}} }

func (r *runs) add(id, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[id]++
	r.on[id] = node
}

func (r *runs) node(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.on[id]
}

func (r *runs) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// fakeLocal "runs" a job: a job whose command is "hold" waits for
// release (or a cancel); any other writes testOutput(id) and succeeds.
type fakeLocal struct {
	node  string
	lanes []string
	slots int
	runs  *runs

	mu      sync.Mutex
	running map[string]*fakeJob
	freed   func()
	started chan string
}

type fakeJob struct {
	id      string
	sink    func(string, []byte)
	done    func(api.JobRecord)
	release chan api.State
	stdin   chan stdinPiece // a "cat" job's
	ended   chan struct{}
	deaf    bool // its runner takes no streamed stdin
}

// stdinPiece is a piece of a "cat" job's stdin and its call's answer.
type stdinPiece struct {
	data  []byte
	eof   bool
	taken func(error)
}

func newFakeLocal(node string, lanes []string, slots int, r *runs) *fakeLocal {
	return &fakeLocal{node: node, lanes: lanes, slots: slots, runs: r, running: map[string]*fakeJob{},
		started: make(chan string, 1000)}
}

func (l *fakeLocal) SharedLanes() []string { return l.lanes }

func (l *fakeLocal) FreeSlots(string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(0, l.slots-len(l.running))
}

func (l *fakeLocal) OnSlotFreed(fn func()) {
	l.mu.Lock()
	l.freed = fn
	l.mu.Unlock()
}

// testOutput is what a job that does not hold writes: more than one
// output message, pieces of both streams.
func testOutput(id string) [][2]string {
	var out [][2]string
	out = append(out, [2]string{"stdout", strings.Repeat("x", pieceMax+100) + id})
	for i := range 12 {
		s := "stdout"
		if i%3 == 0 {
			s = "stderr"
		}
		out = append(out, [2]string{s, fmt.Sprintf("%s line %d\n", id, i)})
	}
	return out
}

// floodPiece is the ith piece a "flood" job writes: 40 to 1500 bytes.
func floodPiece(id string, i int) []byte {
	head := fmt.Sprintf("%s piece %d:", id, i)
	return append([]byte(head), bytes.Repeat([]byte{'a' + byte(i%26)}, 20+(i*7919)%1480)...)
}

// floodBytes is what a "flood" job that wrote n bytes wrote.
func floodBytes(id string, n int64) []byte {
	var out []byte
	for i := 0; int64(len(out)) < n; i++ {
		out = append(out, floodPiece(id, i)...)
	}
	return out
}

func outputBytes(id string) string {
	var b strings.Builder
	for _, p := range testOutput(id) {
		b.WriteString(p[1])
	}
	return b.String()
}

func (l *fakeLocal) Run(id string, spec api.JobSpec, sink func(string, []byte), done func(api.JobRecord)) error {
	if l.FreeSlots(spec.Lane) <= 0 {
		return fmt.Errorf("lane %s is full", spec.Lane)
	}
	l.runs.add(id, l.node)
	j := &fakeJob{id: id, sink: sink, done: done, release: make(chan api.State, 1), stdin: make(chan stdinPiece),
		ended: make(chan struct{}), deaf: spec.Command == "deaf"}
	l.mu.Lock()
	l.running[id] = j
	l.mu.Unlock()
	l.started <- id
	go func() {
		st := api.StateSucceeded
		n := 0
		switch {
		case spec.Command == "cat" && spec.StdinStream:
			// Its stdin back as its output, a piece taken at a time;
			// cancelled, it reads no more.
			for eof := false; !eof; {
				select {
				case p := <-j.stdin:
					sink("stdout", p.data)
					n += len(p.data)
					eof = p.eof
					p.taken(nil)
				case st = <-j.release:
					eof = true
				}
			}
		case spec.Command == "flood":
			// Numbered pieces of varying sizes (floodPiece), about one
			// a millisecond, until released.
			for i := 0; ; i++ {
				select {
				case st = <-j.release:
				case <-time.After(time.Millisecond):
					p := floodPiece(id, i)
					sink("stdout", p)
					n += len(p)
					continue
				}
				break
			}
		case spec.Command == "hold" || spec.Command == "deaf":
			st = <-j.release
			sink("stdout", []byte("held "+id))
			n = len("held " + id)
		default:
			for _, p := range testOutput(id) {
				sink(p[0], []byte(p[1]))
				n += len(p[1])
			}
		}
		l.finish(j, st, n)
	}()
	return nil
}

func (l *fakeLocal) finish(j *fakeJob, st api.State, n int) {
	l.mu.Lock()
	delete(l.running, j.id)
	fn := l.freed
	l.mu.Unlock()
	close(j.ended)
	code := int32(0)
	now := time.Now().UTC()
	rec := api.JobRecord{ID: j.id, State: st, ExitCode: &code, FinishedAt: &now, WasCancelled: st == api.StateCancelled,
		OutputBytes: int64(n)}
	j.done(rec)
	if fn != nil {
		fn()
	}
}

// release ends a held job.
func (l *fakeLocal) release(id string, st api.State) bool {
	l.mu.Lock()
	j := l.running[id]
	l.mu.Unlock()
	if j == nil {
		return false
	}
	j.release <- st
	return true
}

func (l *fakeLocal) Stdin(id string, data []byte, eof bool, reply func(error)) {
	l.mu.Lock()
	j := l.running[id]
	l.mu.Unlock()
	if j == nil {
		reply(api.Errorf(api.CodeNotFound, "job %s does not run here", id))
		return
	}
	if j.deaf {
		reply(&api.Error{Code: api.CodeInvalidState, Data: map[string]string{"stdin": "unsupported"},
			Message: "job " + id + " runs on a runner that takes no streamed stdin"})
		return
	}
	go func() {
		select {
		case j.stdin <- stdinPiece{data: data, eof: eof, taken: reply}:
		case <-j.ended:
			reply(api.Errorf(api.CodeInvalidState, "job %s finished; its stdin is closed", id))
		}
	}()
}

func (l *fakeLocal) Cancel(id string, _ bool, reply func(bool, error)) {
	if !l.release(id, api.StateCancelled) {
		reply(false, api.Errorf(api.CodeNotFound, "job %s does not run here", id))
		return
	}
	reply(true, nil)
}

// recorder keeps a node's events.
type recorder struct{ *eventlogtest.Recorder }

func (r recorder) kinds(kind string) []eventlog.Event { return kindsOf(r.Records(), kind) }

// kindsOf are the events of kind among recs.
func kindsOf(recs []*eventlog.Record, kind string) []eventlog.Event {
	var out []eventlog.Event
	for _, rec := range recs {
		if rec.Event.Kind() == kind {
			out = append(out, rec.Event)
		}
	}
	return out
}

type testNode struct {
	name  string
	f     *Fleet
	local *fakeLocal
	bus   *eventlog.Bus
	ev    recorder
	home  string
}

type nodeSpec struct {
	lanes []string
	slots int
	// certLanes: the lanes its certificate lists (nil: every lane).
	certLanes []string
}

// freePorts finds n free ports on 127.0.0.1 (routes need them known
// before any server starts).
//
// They are below Linux's ephemeral range (32768 and up), each handed out
// once in this test binary: a port the kernel gave a listener (":0") and
// took back may be given again at once to an outgoing connection (another
// package's daemons run beside these tests), and a route port then fails
// to bind.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try > 1000 {
			t.Fatal("no free port below 32000")
		}
		p := 20000 + mrand.IntN(12000)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[p] = true
		ports = append(ports, p)
	}
	return ports
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// startCluster starts len(specs) nodes, n0, n1..., routed to each other,
// heartbeat hb; they are closed at the end of the test.
func startCluster(t *testing.T, hb time.Duration, r *runs, specs ...nodeSpec) []*testNode {
	t.Helper()
	return startClusterWith(t, hb, r, nil, specs...)
}

// startClusterWith is startCluster with each node's config changed by mod
// (when set) before it starts.
func startClusterWith(t *testing.T, hb time.Duration, r *runs, mod func(*Config), specs ...nodeSpec) []*testNode {
	t.Helper()
	dir := t.TempDir()
	names := make([]string, len(specs))
	for i := range specs {
		names[i] = fmt.Sprintf("n%d", i)
	}
	certLanes := map[string][]string{}
	for i, sp := range specs {
		certLanes[names[i]] = sp.certLanes
	}
	creds := makeCredsLanes(t, filepath.Join(dir, "creds"), certLanes, names...)
	ports := freePorts(t, len(specs))
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	nodes := make([]*testNode, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		name := fmt.Sprintf("n%d", i)
		home := filepath.Join(dir, name)
		if err := os.MkdirAll(home, 0o700); err != nil {
			t.Fatal(err)
		}
		bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		rec := recorder{eventlogtest.NewRecorder()}
		bus.Subscribe(nil, rec)
		n := &testNode{name: name, local: newFakeLocal(name, sp.lanes, sp.slots, r), bus: bus, ev: rec, home: home}
		nodes[i] = n
		cfg := Config{Enabled: true, Name: name, Listen: "127.0.0.1:0", ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[i]),
			Routes: routes, Credentials: creds[name], Heartbeat: api.Duration{Duration: hb}, StartTimeout: api.Duration{Duration: testWait}}
		if mod != nil {
			mod(&cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Str("node", name).Logger()
			n.f, errs[i] = Start(ctx, Options{Config: cfg, Home: home, Local: n.local, Bus: bus, Logger: log})
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range nodes {
			if n.f == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A node cut off records no end: bounded.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				// Held jobs end (as the lanes end theirs at shutdown).
				n.f.StopTaking()
				n.local.mu.Lock()
				var held []string
				for id := range n.local.running {
					held = append(held, id)
				}
				n.local.mu.Unlock()
				for _, id := range held {
					n.local.release(id, api.StateFailed)
				}
				if err := n.f.Close(ctx); err != nil {
					t.Errorf("closing %s: %v", n.name, err)
				}
			}()
		}
		wg.Wait()
		for _, n := range nodes {
			n.bus.Close()
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("starting %s: %v", nodes[i].name, err)
		}
	}
	// Every node sees every other alive.
	for _, n := range nodes {
		waitFor(t, n.name+" sees the fleet", func() bool {
			alive := 0
			for _, s := range n.f.Nodes() {
				if s.State == nodeAlive {
					alive++
				}
			}
			return alive == len(nodes)
		})
	}
	return nodes
}

// waitFor polls cond until it holds, failing after testWait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitEvery(t, 20*time.Millisecond, what, cond)
}

// waitEvery polls cond every d until it holds, failing after testWait.
func waitEvery(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, testWait)
		}
		time.Sleep(d)
	}
}

// submit submits spec on n and returns the id.
func submit(t *testing.T, n *testNode, spec api.JobSpec) string {
	t.Helper()
	id, err := trySubmit(n, spec)
	if err != nil {
		t.Fatalf("submitting on %s: %v", n.name, err)
	}
	return id
}

func trySubmit(n *testNode, spec api.JobSpec) (string, error) {
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 1)
	n.f.Submit(spec, func(id string, err error) { ch <- res{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-time.After(testWait):
		return "", fmt.Errorf("no answer to the submission after %v", testWait)
	}
}

// waitEnd waits on n for id's terminal record.
func waitEnd(t *testing.T, n *testNode, id string) api.JobRecord {
	t.Helper()
	ch := make(chan api.JobRecord, 1)
	cancel, err := n.f.Wait(id, func(r api.JobRecord) { ch <- r })
	if err != nil {
		t.Fatalf("waiting for %s on %s: %v", id, n.name, err)
	}
	defer cancel()
	select {
	case r := <-ch:
		return r
	case <-time.After(testWait):
		rec, found, err := n.f.Get(id)
		t.Fatalf("%s has not ended after %v: %v %v %+v", id, testWait, found, err, rec)
		return api.JobRecord{}
	}
}

func (n *testNode) waitStarted(t *testing.T) string {
	t.Helper()
	select {
	case id := <-n.local.started:
		return id
	case <-time.After(testWait):
		t.Fatalf("no job started on %s after %v", n.name, testWait)
		return ""
	}
}

// holdOn submits a job of lane that holds (fakeLocal's "hold") from node
// from and waits until it starts on node n; its id.
func (n *testNode) holdOn(t *testing.T, from *testNode, lane string) string {
	t.Helper()
	id := submit(t, from, api.JobSpec{Lane: lane, Command: "hold"})
	if got := n.waitStarted(t); got != id {
		t.Fatalf("%s started %s, want %s", n.name, got, id)
	}
	return id
}

// startNode starts one node of cfg (stopped at the test's end).
func startNode(t *testing.T, cfg Config, local *fakeLocal, home string, mod ...func(*Options)) *testNode {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	rec := recorder{eventlogtest.NewRecorder()}
	bus.Subscribe(nil, rec)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if cfg.StartTimeout.Duration == 0 {
		cfg.StartTimeout.Duration = testWait
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	o := Options{Config: cfg, Home: home, Local: local, Bus: bus, Logger: log}
	for _, m := range mod {
		m(&o)
	}
	f, err := Start(ctx, o)
	if err != nil {
		bus.Close()
		t.Fatal(err)
	}
	n := &testNode{name: cfg.Name, f: f, local: local, bus: bus, ev: rec, home: home}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.StopTaking()
		f.Close(ctx)
		bus.Close()
	})
	return n
}

// makeCreds makes a fleet's key in keyHome and each name's credentials
// (the first by InitFleet, the others by AddNode); it returns their
// paths by name.
func makeCreds(t *testing.T, keyHome string, names ...string) map[string]string {
	t.Helper()
	return makeCredsLanes(t, keyHome, nil, names...)
}

// makeCredsLanes is makeCreds, each node certified to serve lanes[name]
// (nil: every lane).
func makeCredsLanes(t *testing.T, keyHome string, lanes map[string][]string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_, first, err := InitFleet(keyHome, names[0], lanes[names[0]], false)
	if err != nil {
		t.Fatal(err)
	}
	out[names[0]] = first
	for _, n := range names[1:] {
		out[n] = filepath.Join(keyHome, n+".creds")
		if _, err := AddNode(keyHome, n, lanes[n], out[n], false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// loginOpts are the NATS options of the node whose credentials are at
// path: its nkey and certificate.
func loginOpts(t *testing.T, path string) []nats.Option {
	t.Helper()
	id, err := readIdentity(path, "")
	if err != nil {
		t.Fatal(err)
	}
	return []nats.Option{nats.Nkey(id.pub, func(nonce []byte) ([]byte, error) { return id.kp.Sign(nonce) }), nats.Token(id.loginToken())}
}
