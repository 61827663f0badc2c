// Package fleet is orchestrd's fleet: the lanes shared across machines
// (shared = true), on NATS. It starts an embedded nats-server (JetStream,
// routes to the other nodes' servers) or connects to an external NATS,
// heartbeats this node into a key-value bucket, declares silent nodes lost
// (once in the fleet), commits every submission to a shared lane into that
// lane's JetStream work queue, takes jobs from the queues of the lanes this
// node serves when it has room (recording each as its own before
// acknowledging it: a job runs at most once), keeps job records in a
// replicated bucket and job output in a stream every node can follow.
// ARCHITECTURE.md ("The fleet") has the subjects, streams, buckets and their limits.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Names in NATS.
const (
	jobsBucket    = "orchestrd_jobs"
	nodesBucket   = "orchestrd_nodes"
	outputStream  = "ORCHESTRD_OUTPUT"
	eventsStream  = "ORCHESTRD_EVENTS"
	laneStreamPfx = "ORCHESTRD_LANE_"
	laneSubjPfx   = "orchestrd.lane."
	outSubjPfx    = "orchestrd.out."
	inputStream   = "ORCHESTRD_INPUT"
	inSubjPfx     = "orchestrd.in."
	inTakenPfx    = "orchestrd.intaken."
	eventsSubjPfx = "orchestrd.events."
	nodeSubjPfx   = "orchestrd.node."
	workers       = "workers"

	hdrStream = "Orchestrd-Stream"
	hdrEOF    = "Orchestrd-Eof"
)

// Limits (ARCHITECTURE.md, "The fleet").
const (
	jobsMaxAge      = 7 * 24 * time.Hour
	jobsMaxBytes    = 1 << 30
	outputMaxAge    = time.Hour
	outputMaxBytes  = 1 << 30
	inputMaxAge     = time.Hour
	inputMaxBytes   = 1 << 30
	inputPerJob     = 8 // pieces of a job's stdin kept, not yet given to it
	eventsMaxAge    = 24 * time.Hour
	eventsMaxBytes  = 256 << 20
	laneMaxMsgs     = 100_000
	laneMaxBytes    = 1 << 30
	laneMaxMsgSize  = 1 << 20
	maxAckPending   = 1024
	pieceMax        = 64 << 10 // an output message's data
	pubWindow       = 32       // output messages in flight per job
	eventQueue      = 4096     // event lines waiting for the publisher
	submitsInFlight = 256
	opTimeout       = 5 * time.Second
	stepTimeout     = 4 * opTimeout // a read's step, its retries included (readOutput)
	endRetryFor     = 30 * time.Second
	republishEvery  = 250 * time.Millisecond // a failed output piece, again
	// pieceAckWait: an output piece not acknowledged this long after its
	// sending is published again (a duplicate costs readers nothing: they
	// take each offset once).
	pieceAckWait = 3 * time.Second
	// submitFor bounds a submission, its tries again included: long
	// enough to ride out a JetStream leader election (seconds), short of
	// the CLI's 30 s.
	submitFor        = 20 * time.Second
	retryPause       = 200 * time.Millisecond
	defaultKeptBytes = 1 << 20 // lanes' default max_output_bytes
)

// Options is what Start needs.
type Options struct {
	Config Config
	Home   string
	Local  Local
	Bus    *eventlog.Bus // nil: no events (tests)
	Logger zerolog.Logger
	// Identity is this node's credentials as Check read them before the
	// daemon started anything; nil: Start reads them.
	Identity *Identity
	// dial, when set, is how the client reaches its server (tests: a
	// connection that holds what the server sends).
	dial nats.CustomDialer
}

// Identity is this node's fleet credentials, read and checked (Check).
type Identity struct{ id *identity }

// Check reads this node's credentials ([cluster] credentials, default
// <home>/cluster.creds) and checks that they let it serve shared, the
// shared lanes its config names: what Start would refuse, found before
// the daemon starts anything. Nil when [cluster] is off.
func Check(c Config, home string, shared []string) (*Identity, error) {
	if !c.Enabled {
		return nil, nil
	}
	cfg := c.withDefaults(home)
	id, err := readIdentity(cfg.Credentials, c.Name)
	if err != nil {
		return nil, err
	}
	if _, err := servedLanes(id, cfg.Credentials, shared, nil); err != nil {
		return nil, err
	}
	return &Identity{id}, nil
}

// servedLanes are the shared lanes this node serves in the fleet: those
// whose names can be NATS subjects (the others stay local, warned of when
// warn is set), each one its credentials let it serve, or an error.
func servedLanes(id *identity, creds string, shared []string, warn func(lane string)) ([]string, error) {
	var out []string
	for _, l := range shared {
		if !validToken(l) {
			if warn != nil {
				warn(l)
			}
			continue
		}
		if !mayServe(id.lanes, l) {
			return nil, fmt.Errorf("serving shared lane %s in the fleet: node %s's credentials (%s) let it serve only lanes %s: "+
				"make it new ones with `orchestrd cluster add-node %s --lanes %s,%s`, or set shared = false on the lane",
				l, id.node, creds, strings.Join(id.lanes, ","), id.node, strings.Join(id.lanes, ","), l)
		}
		out = append(out, l)
	}
	return out, nil
}

// Fleet is this node in the fleet.
type Fleet struct {
	home      string // the daemon's home (its free space is in the heartbeat's figures)
	dial      nats.CustomDialer
	cfg       Config
	local     Local
	bus       *eventlog.Bus
	log       zerolog.Logger
	name, inc string
	idPrefix  string
	seq       atomic.Uint64
	startedAt time.Time
	mode, url string
	lanes     []string // the shared lanes this node serves

	srv   *server.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	jobs  jetstream.KeyValue
	nodes jetstream.KeyValue
	out   jetstream.Stream
	in    jetstream.Stream
	evs   jetstream.Stream
	takes jetstream.Stream

	// This node's identity (its key, certified by the fleet's), and what
	// checking others' costs once: certificates, take claims, refusals
	// told (under refMu).
	id          *identity
	certs       certs
	claims      claims
	refMu       sync.Mutex
	refusedSeen map[string]bool

	ctx    context.Context // the fleet's life
	cancel context.CancelFunc
	wg     sync.WaitGroup

	takeCtx    context.Context
	takeCancel context.CancelFunc
	takeWG     sync.WaitGroup
	wakes      []chan struct{}

	jw *jobWatch // the waiters' shared watch of the jobs bucket

	ending  atomic.Int64  // job ends being recorded
	submits chan struct{} // a slot per submission in flight

	mu      sync.Mutex
	peers   map[string]*peer
	running map[string]*runJob
	// stdinBusy: jobs with a job.stdin call of this node's under way (one
	// at a time per job, as on one node).
	stdinBusy map[string]bool
	hbRev     uint64

	evq       chan []byte
	evDropped atomic.Uint64
	unsubBus  func()
	cancelSub *nats.Subscription

	beatOK atomic.Int64 // when this node's heartbeat was last written (unix ns)
	sweeps int          // checks made (the watcher's goroutine only)
	// Node incarnations whose jobs are swept, and whether a first sweep
	// (of everything) was made; under mu.
	suspects  map[stray]time.Time
	sweptOnce bool
	// This node's own jobs that may stand unfinished in the jobs bucket
	// under its live incarnation (sweepOwn), under mu: the ends it could
	// not record (up to keptEnds), and since when a write of its own may
	// have landed with its reply lost (zero: none).
	unended   map[string]jobEntry
	doubtAt   time.Time
	hbPaused  atomic.Bool // tests: a node stopped (SIGSTOP) stops heartbeating
	pubPaused atomic.Bool // tests: the event publisher takes no line
	// tests: called between a take and the lane's start
	beforeRun atomic.Pointer[func(id string)]
	// weakCAS: the NATS server is older than 2.10, where two nodes' CASes
	// on one revision of a record can both succeed (the last write
	// stands): a take, an end and a node_lost failure are read back
	// (casSettle, casStood) before this node acts on them.
	weakCAS atomic.Bool
	// tests: called after a CAS that is then read back (what: take, end,
	// fail), before casSettle's wait
	afterCAS atomic.Pointer[func(what, id string)]
	// tests: a take's write that succeeded reports an error (its reply
	// lost); an end finds the fleet unreachable, as if for endRetryFor
	lostTakeReply  atomic.Pointer[func(id string) bool]
	endUnreachable atomic.Pointer[func(id string) bool]

	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
}

// peer is a node as this one sees it in the nodes bucket.
type peer struct {
	info nodeInfo
	rev  uint64
	seen time.Time // when this node saw rev (monotonic)
}

// Start joins the fleet: the embedded server (or the external URL), the
// streams and buckets, this node's heartbeat, then taking jobs. It returns
// once all of that works (bounded by ctx and 2 minutes: a JetStream
// cluster needs enough of its nodes up for its replicas).
func Start(ctx context.Context, o Options) (*Fleet, error) {
	cfg := o.Config.withDefaults(o.Home)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var id *identity
	var err error
	if o.Identity != nil {
		id = o.Identity.id
	} else if id, err = readIdentity(cfg.Credentials, o.Config.Name); err != nil {
		return nil, err
	}
	cfg.Name = id.node // the [cluster] name, else the credentials'
	f := &Fleet{cfg: cfg, id: id, local: o.Local, bus: o.Bus, log: o.Logger.With().Str("component", "fleet").Logger(),
		name: cfg.Name, inc: api.RandomHex(8), idPrefix: api.ClusterJobPrefix + api.RandomHex(idStartHex/2), startedAt: time.Now().UTC(),
		peers: map[string]*peer{}, suspects: map[stray]time.Time{}, unended: map[string]jobEntry{}, running: map[string]*runJob{}, stdinBusy: map[string]bool{}, evq: make(chan []byte, eventQueue),
		submits: make(chan struct{}, submitsInFlight), jw: newJobWatch(), home: o.Home, dial: o.dial}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.takeCtx, f.takeCancel = context.WithCancel(f.ctx)
	f.lanes, err = servedLanes(id, cfg.Credentials, o.Local.SharedLanes(), func(l string) {
		f.log.Warn().Str("lane", l).Msg("a shared lane's name must be [A-Za-z0-9_-] (at most 64) to be a NATS subject: it stays local")
	})
	if err != nil {
		f.cancel()
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.teardown()
		}
	}()
	if cfg.URL == "" {
		f.srv, err = startEmbedded(cfg, o.Home, id, o.Logger)
		if err != nil {
			return nil, err
		}
		f.mode, f.url = "embedded", f.srv.ClientURL()
	} else {
		f.mode, f.url = "external", redactURL(cfg.URL)
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout.Duration)
	defer cancel()
	if err := f.connect(sctx); err != nil {
		return nil, err
	}
	if err := f.setup(sctx); err != nil {
		return nil, err
	}
	if err := f.join(sctx); err != nil {
		return nil, err
	}
	if f.bus != nil {
		// Queued until the publisher starts, below.
		f.unsubBus = f.bus.Subscribe(nil, busSink{f})
	}
	sv := f.nc.ConnectedServerVersion()
	if versionBefore(sv, 2, 10) {
		// Seen with Debian's 2.9.10: two CASes on one revision both
		// succeeded (ARCHITECTURE.md, "The fleet").
		f.weakCAS.Store(true)
		f.log.Warn().Str("server_version", sv).Msg("the NATS server is older than 2.10: two nodes writing one job record at once may both succeed, so every take, end and node_lost failure is read back 250 ms after it is written before this node acts on it (each job starts 250 ms later). Run nats-server 2.10 or later")
	}
	f.emit(ClusterStarted{Node: f.name, Incarnation: f.inc, Mode: f.mode, URL: f.url, Lanes: f.lanes, Replicas: cfg.Replicas,
		ServerVersion: sv})
	f.emit(ClusterNodeJoined{Node: f.name, Incarnation: f.inc, Lanes: f.lanes})
	f.cancelSub, err = f.nc.Subscribe(nodeSubjPfx+f.name+".cancel", f.serveCancel)
	if err != nil {
		return nil, fmt.Errorf("subscribing to this node's cancels: %w", err)
	}
	f.wg.Add(4)
	go f.heartbeats()
	go f.watchNodes()
	go f.publishEvents()
	go f.watchJobs()
	if err := f.startTaking(sctx); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// startWaitWarn is how long a step of the fleet's start may keep failing
// before each failure is a warning (and then once every startWaitWarn):
// an operator reading the log sees what the start waits for.
const startWaitWarn = 30 * time.Second

// startWaiter reports the failed tries of one step of the fleet's start,
// which are tried again until the start_timeout: a new error at debug
// level, and from startWaitWarn on a warning every startWaitWarn with
// the last error and how long the step has waited.
type startWaiter struct {
	f      *Fleet
	step   string
	since  time.Time
	warned time.Time
	last   string
}

func (f *Fleet) startWait(step string) *startWaiter {
	return &startWaiter{f: f, step: step, since: time.Now()}
}

func (w *startWaiter) failed(err error) {
	now := time.Now()
	waited := now.Sub(w.since)
	switch {
	case waited >= startWaitWarn && now.Sub(w.warned) >= startWaitWarn:
		w.warned = now
		server := "" // the NATS server this node's requests go through
		if w.f.nc != nil {
			server = w.f.nc.ConnectedServerName()
		}
		w.f.log.Warn().Err(err).Str("step", w.step).Str("server", server).Dur("waited", waited).
			Dur("start_timeout", w.f.cfg.StartTimeout.Duration).
			Msg("the fleet's start is still waiting for JetStream; trying again until its start_timeout")
	case err.Error() != w.last:
		w.f.log.Debug().Err(err).Str("step", w.step).Msg("JetStream not ready yet")
	}
	w.last = err.Error()
}

// connect connects the client: to the embedded server only (its
// neighbours are reached through routes), or to the external URLs.
func (f *Fleet) connect(ctx context.Context) error {
	url := f.cfg.URL
	opts := []nats.Option{
		nats.Name("orchestrd " + f.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(opTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			e := ""
			if err != nil {
				e = err.Error()
			}
			f.emit(ClusterDisconnected{Node: f.name, Error: e})
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			f.resetSeen()
			f.emit(ClusterReconnected{Node: f.name, URL: redactURL(nc.ConnectedUrlRedacted())})
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			f.log.Warn().Err(err).Msg("NATS asynchronous error")
		}),
	}
	if f.srv != nil {
		url = f.srv.ClientURL()
		opts = append(opts, nats.IgnoreDiscoveredServers())
	}
	if f.dial != nil {
		opts = append(opts, nats.SetCustomDialer(f.dial))
	}
	// The node's own nkey: an external server lists it as a user; the
	// embedded servers admit any node the fleet's key certified, its
	// certificate carried as the token (nodeAuth).
	opts = append(opts, nats.Nkey(f.id.pub, func(nonce []byte) ([]byte, error) { return f.id.kp.Sign(nonce) }),
		nats.Token(f.id.loginToken()))
	if f.cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(f.cfg.TLSCA))
	}
	if f.cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(f.cfg.TLSCert, f.cfg.TLSKey))
	}
	// A refusal (credentials, TLS) is final; anything else (the server
	// not up yet, or too loaded to answer the handshake in time: "expected
	// 'PONG', got 'PING'" under CI's load) is tried again, every 250 ms,
	// within ctx.
	var nc *nats.Conn
	for try := 0; ; try++ {
		var err error
		nc, err = nats.Connect(url, opts...)
		if err == nil {
			break
		}
		err = fmt.Errorf("connecting to NATS at %s: %w", redactURL(url), err)
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrPermissionViolation) {
			return err
		}
		if try == 0 {
			f.log.Warn().Err(err).Dur("start_timeout", f.cfg.StartTimeout.Duration).Msg("connecting to NATS: trying again every 250 ms until the fleet's start_timeout")
		} else {
			f.log.Debug().Err(err).Msg("connecting to NATS: trying again")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	f.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	f.js = js
	return nil
}

// setup makes (or finds) the buckets and streams, retrying while
// JetStream is not ready (a cluster electing its leader, too few nodes up
// for the replicas).
func (f *Fleet) setup(ctx context.Context) error {
	r := f.cfg.Replicas
	w := f.startWait("making the fleet's streams and buckets")
	for {
		err := f.setupOnce(ctx, r)
		if err == nil {
			return nil
		}
		w.failed(err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("making the fleet's streams and buckets (replicas %d): %w (last: %v)", r, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (f *Fleet) setupOnce(ctx context.Context, r int) error {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var err error
	if f.jobs == nil {
		f.jobs, err = f.bucket(octx, jetstream.KeyValueConfig{Bucket: jobsBucket, History: 1, TTL: jobsMaxAge,
			MaxBytes: jobsMaxBytes, MaxValueSize: maxJobValue, Storage: jetstream.FileStorage, Replicas: r})
		if err != nil {
			return err
		}
	}
	if f.nodes == nil {
		f.nodes, err = f.bucket(octx, jetstream.KeyValueConfig{Bucket: nodesBucket, History: 1,
			MaxValueSize: maxNodeValue, MaxBytes: 64 << 20, Storage: jetstream.FileStorage, Replicas: r})
		if err != nil {
			return err
		}
	}
	if f.out == nil {
		f.out, err = f.stream(octx, jetstream.StreamConfig{Name: outputStream, Subjects: []string{outSubjPfx + ">"},
			Retention: jetstream.LimitsPolicy, MaxAge: outputMaxAge, MaxBytes: outputMaxBytes, Discard: jetstream.DiscardOld,
			Storage: jetstream.FileStorage, Replicas: r, MaxMsgSize: laneMaxMsgSize})
		if err != nil {
			return err
		}
	}
	if f.in == nil {
		f.in, err = f.stream(octx, jetstream.StreamConfig{Name: inputStream, Subjects: []string{inSubjPfx + ">"},
			Retention: jetstream.LimitsPolicy, MaxAge: inputMaxAge, MaxBytes: inputMaxBytes,
			Discard: jetstream.DiscardNew, DiscardNewPerSubject: true, MaxMsgsPerSubject: inputPerJob,
			Storage: jetstream.FileStorage, Replicas: r, MaxMsgSize: laneMaxMsgSize})
		if err != nil {
			return err
		}
	}
	if f.takes == nil {
		// One take claim per job, never replaced nor removed: a second
		// is refused by the stream (ARCHITECTURE.md, "Who may write what").
		f.takes, err = f.stream(octx, jetstream.StreamConfig{Name: takesStream, Subjects: []string{takeSubjPfx + ">"},
			Retention: jetstream.LimitsPolicy, MaxAge: jobsMaxAge, MaxBytes: jobsMaxBytes, Discard: jetstream.DiscardNew,
			DiscardNewPerSubject: true, MaxMsgsPerSubject: 1, DenyDelete: true, DenyPurge: true,
			Storage: jetstream.FileStorage, Replicas: r, MaxMsgSize: 16 << 10})
		if err != nil {
			return err
		}
	}
	if f.evs == nil {
		f.evs, err = f.stream(octx, jetstream.StreamConfig{Name: eventsStream, Subjects: []string{eventsSubjPfx + ">"},
			Retention: jetstream.LimitsPolicy, MaxAge: eventsMaxAge, MaxBytes: eventsMaxBytes, Discard: jetstream.DiscardOld,
			Storage: jetstream.FileStorage, Replicas: r, MaxMsgSize: laneMaxMsgSize})
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *Fleet) bucket(ctx context.Context, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := f.js.CreateKeyValue(ctx, c)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = f.js.KeyValue(ctx, c.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("making bucket %s: %w", c.Bucket, err)
	}
	// A bucket's reads are direct gets by default, which any replica
	// answers, however far behind: a compare-and-set on a stale revision
	// fails for ever, and a stale read misses a job's dispatch. Every read
	// here goes to the leader.
	for {
		s, err := f.js.Stream(ctx, "KV_"+c.Bucket)
		if err != nil {
			return nil, fmt.Errorf("reading bucket %s's stream: %w", c.Bucket, err)
		}
		cfg := s.CachedInfo().Config
		if !cfg.AllowDirect {
			break
		}
		cfg.AllowDirect = false
		if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("making bucket %s's reads go to its leader: %w", c.Bucket, err)
		}
	}
	// Bound again whatever the handle above said: a handle made while
	// direct gets were on (another node turned them off in between) asks
	// a subject nobody answers any more, for ever ("no responders").
	if kv, err = f.js.KeyValue(ctx, c.Bucket); err != nil {
		return nil, fmt.Errorf("binding bucket %s: %w", c.Bucket, err)
	}
	return kv, nil
}

func (f *Fleet) stream(ctx context.Context, c jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := f.js.CreateStream(ctx, c)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = f.js.Stream(ctx, c.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("making stream %s: %w", c.Name, err)
	}
	return s, nil
}

// laneConsumer makes (or finds) lane's queue and its shared consumer.
func (f *Fleet) laneConsumer(ctx context.Context, lane string) (jetstream.Consumer, error) {
	s, err := f.stream(ctx, jetstream.StreamConfig{Name: laneStreamPfx + lane, Subjects: []string{laneSubjPfx + lane},
		Retention: jetstream.WorkQueuePolicy, MaxMsgs: laneMaxMsgs, MaxBytes: laneMaxBytes, MaxMsgSize: laneMaxMsgSize,
		Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage, Replicas: f.cfg.Replicas})
	if err != nil {
		return nil, err
	}
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: workers, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 2 * f.cfg.Heartbeat.Duration, MaxAckPending: maxAckPending, MaxDeliver: -1, MaxWaiting: 512})
	if err != nil {
		return nil, fmt.Errorf("making lane %s's consumer: %w", lane, err)
	}
	return c, nil
}

// StopTaking stops taking jobs (shutdown's first step): the jobs already
// taken run on, and their ends are recorded.
func (f *Fleet) StopTaking() {
	f.stopOnce.Do(func() {
		f.takeCancel()
		f.takeWG.Wait()
	})
}

// Close leaves the fleet: stops taking, waits (within ctx) for the ends
// being recorded, marks this node stopped (not lost), stops heartbeating,
// publishes the last events, closes the connection and stops the embedded
// server.
func (f *Fleet) Close(ctx context.Context) error {
	f.closeOnce.Do(func() {
		f.StopTaking()
		for f.ending.Load() > 0 {
			select {
			case <-ctx.Done():
				f.log.Warn().Int64("ends", f.ending.Load()).Msg("leaving the fleet with job ends not recorded")
			case <-time.After(20 * time.Millisecond):
				continue
			}
			break
		}
		f.mu.Lock()
		rev := f.hbRev
		f.mu.Unlock()
		f.hbPaused.Store(true)
		if b, err := f.sealNode(f.nodeInfo(nodeStopped)); err == nil {
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			if _, err := f.nodes.Update(octx, f.name, b, rev); err != nil {
				f.log.Debug().Err(err).Msg("marking this node stopped")
			}
			cancel()
		}
		f.emit(ClusterStopped{Node: f.name, EventsDropped: f.evDropped.Load()})
		f.teardown()
	})
	return f.closeErr
}

// teardown stops everything Start started, in reverse.
func (f *Fleet) teardown() {
	if f.unsubBus != nil {
		f.unsubBus()
	}
	f.takeCancel()
	f.takeWG.Wait()
	f.cancel()
	f.wg.Wait()
	if f.cancelSub != nil {
		_ = f.cancelSub.Unsubscribe()
	}
	if f.nc != nil {
		if err := f.nc.FlushTimeout(time.Second); err != nil {
			f.log.Debug().Err(err).Msg("flushing the NATS connection")
		}
		f.nc.Close()
	}
	if f.srv != nil {
		f.srv.Shutdown()
		f.srv.WaitForShutdown()
	}
}

func (f *Fleet) emit(ev eventlog.Event) {
	if f.bus != nil {
		f.bus.Emit(ev)
	}
}

// Name is this node's name in the fleet.
func (f *Fleet) Name() string { return f.name }

// URL is the NATS URL this node's client uses (without credentials).
func (f *Fleet) URL() string { return f.url }

// Cluster names the fleet this node is in: the first 12 characters of
// the fleet's public key, which certified every node (the same on each).
func (f *Fleet) Cluster() string { return ClusterID(f.id.fleet) }

// ClusterID is the fleet named by its public key: its first 12
// characters.
func ClusterID(fleetKey string) string { return fleetKey[:min(12, len(fleetKey))] }

// Mode is "embedded" (this node's own NATS server) or "external".
func (f *Fleet) Mode() string { return f.mode }

// Serves: lane is a shared lane some live node serves (this one included).
func (f *Fleet) Serves(lane string) bool {
	if slices.Contains(f.lanes, lane) {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.peers {
		if p.info.State == nodeAlive && slices.Contains(p.info.Lanes, lane) {
			return true
		}
	}
	return false
}

// Owns: id names a cluster job.
func (f *Fleet) Owns(id string) bool { return strings.HasPrefix(id, api.ClusterJobPrefix) }

// newID is a new id of a job of lane (decode.go: laneTag).
func (f *Fleet) newID(lane string) string {
	return f.idPrefix + laneTag(lane) + "-" + strconv.FormatUint(f.seq.Add(1), 10)
}

// again runs op until it succeeds, fails for good or ctx ends. A try that
// reached no stream leader (an election, a server restarting or lost) was
// certainly not carried out and is made again after a pause; so is one
// that ran out of its own time (opTimeout) while ctx has more, which may
// have been carried out: op is told the try (0, 1, ...) so that it can
// tell its own earlier write from another's.
func again(ctx context.Context, op func(ctx context.Context, try int) error) error {
	for try := 0; ; try++ {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := op(octx, try)
		timedOut := octx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !noStream(err) && !(timedOut && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout))) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryPause):
		}
	}
}

// noStream: the request reached no stream leader, or a server that
// refused it at once because JetStream had no quorum ("JetStream system
// temporarily unavailable", 503: seen while a stopped node held the only
// other replica; a CI run's job.get failed on it).
func noStream(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && ae.ErrorCode == jsClusterNotAvailable {
		return true
	}
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// jsClusterNotAvailable is nats-server's JSClusterNotAvailErr (its
// errors.json), which nats.go names no constant for.
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// isWrongSeq: a CAS (Create, Update) lost to another writer.
func isWrongSeq(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// versionBefore says whether a server version "MAJOR.MINOR.PATCH..." is
// older than major.minor; one that does not parse is not judged (false).
func versionBefore(v string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || ma < 0 || mi < 0 {
		return false
	}
	return ma < major || ma == major && mi < minor
}
