package actors

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Ref addresses an actor. The zero Ref addresses nobody; sending to it is a
// no-op.
type Ref struct{ pid *actor.PID }

// IsZero reports whether r addresses nobody.
func (r Ref) IsZero() bool { return r.pid == nil }

// Equal reports whether r and o address the same actor.
func (r Ref) Equal(o Ref) bool {
	if r.pid == nil || o.pid == nil {
		return r.pid == o.pid
	}
	return r.pid.Id == o.pid.Id
}

func (r Ref) String() string {
	if r.pid == nil {
		return "nobody"
	}
	return r.pid.Id
}

// Actor is implemented by every orchestrd actor. Receive runs on the
// actor's own goroutine, one message at a time; it must never block.
type Actor interface{ Receive(c *Context) }

// Lifecycle messages delivered to Receive.
type (
	// Started is the first message of every incarnation.
	Started struct{}
	// Stopping is delivered before the actor's children are stopped.
	Stopping struct{}
	// Stopped is the last message; children are already gone.
	Stopped struct{}
	// Restarting is delivered to the failed incarnation before it is
	// replaced by a fresh one from Props.New.
	Restarting struct{}
	// Terminated tells a parent or watcher that an actor has stopped.
	Terminated struct{ Who Ref }
)

// Directive says what a supervisor does with a child that panicked.
type Directive int

const (
	// Restart replaces the child with a fresh instance from Props.New after
	// stopping its children (OTP one_for_one).
	Restart Directive = iota
	// Stop stops the child for good.
	Stop
)

func (d Directive) String() string {
	if d == Stop {
		return "stop"
	}
	return "restart"
}

// Props describes an actor to spawn.
type Props struct {
	Kind    string       // lanes, lane, runner, job, conns, conn, ...
	ID      string       // unique among its siblings; becomes part of its name
	New     func() Actor // called for the first incarnation and each restart
	OnPanic Directive
	// MaxRestarts in Within: past that a panicking child is stopped instead
	// of restarted (restart intensity). Zero values mean 5 in 10s.
	MaxRestarts int
	Within      time.Duration
	// Inline runs the actor's mailbox on the goroutine that sends to it
	// (when the actor is idle) instead of on a new goroutine. For actors
	// fed mostly by one goroutine of their own, such as a connection's
	// reader, whose handlers never block: it saves a goroutine hand-off
	// per message.
	Inline bool
	// Info, when not nil, is called at each Tree snapshot: what the tree
	// shows of this actor besides its kind and state (a connection's peer,
	// age and queued bytes). It runs on the snapshot's goroutine: it must
	// read only what is safe to read from any goroutine.
	Info func() any
	// ListMax, when > 0, bounds how many of this actor's children a Tree
	// snapshot lists (the first by kind then id); how many were left off is
	// the snapshot's children_left_off.
	ListMax int
}

// Link asks the actor that receives it to watch Ref, which watches it in
// turn: each hears Terminated when the other stops. An actor that takes
// links (a connection's) handles it; others ignore it.
type Link struct{ Ref Ref }

// PanicInfo describes a caught panic.
type PanicInfo struct {
	Kind, ID  string
	Value     any
	Stack     string
	Directive Directive
}

// Options configures a System.
type Options struct {
	Logger zerolog.Logger
	// OnPanic is called (from the supervising actor's goroutine) for every
	// panic caught in an actor, after the directive is chosen.
	OnPanic func(PanicInfo)
	// OnRestart is called when an actor's fresh incarnation starts.
	OnRestart func(kind, id string, restarts int)
}

// System is an actor system plus orchestrd's registry of live actors.
type System struct {
	as   *actor.ActorSystem
	root *actor.RootContext
	opts Options

	mu    sync.Mutex
	nodes map[string]*node // by pid id
	tops  []*node
}

// NewSystem starts an actor system whose runtime logs go to opts.Logger.
func NewSystem(opts Options) *System {
	lg := opts.Logger.With().Str("component", "protoactor").Logger()
	cfg := actor.Configure(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(renameMessage{zerolog.NewSlogHandler(lg)})
		}),
		actor.WithDeadLetterThrottleCount(3),
		actor.WithDeadLetterRequestLogging(false),
	)
	as := actor.NewActorSystemWithConfig(cfg)
	return &System{as: as, root: as.Root, opts: opts, nodes: map[string]*node{}}
}

// inlineDispatcher runs a mailbox on the sender's goroutine, 300 messages
// a batch like protoactor's default dispatcher.
var inlineDispatcher = actor.NewSynchronizedDispatcher(300)

// Spawn starts a top-level actor.
func (s *System) Spawn(p Props) (Ref, error) {
	return s.spawn(nil, p, func(props *actor.Props, name string) (*actor.PID, error) {
		return s.root.SpawnNamed(props.Configure(actor.WithGuardian(&strategy{sys: s})), name)
	})
}

// Send delivers msg to r without a sender. It never blocks.
func (s *System) Send(r Ref, msg any) {
	if r.pid != nil {
		s.root.Send(r.pid, msg)
	}
}

// Stop stops r and waits until it and all its descendants have stopped, or
// ctx ends.
func (s *System) Stop(ctx context.Context, r Ref) error {
	if r.pid == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- s.root.StopFuture(r.pid).Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("stopping actor %s: %w", r, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping actor %s: %w", r, ctx.Err())
	}
}

// Shutdown stops the runtime. Stop the top-level actors first.
func (s *System) Shutdown() { s.as.Shutdown() }

// node is the registry entry behind an actor, kept across restarts.
type node struct {
	kind, id string
	pid      *actor.PID
	parent   *node
	props    Props
	state    atomic.Value // string
	restarts atomic.Int64
	started  time.Time

	mu       sync.Mutex // guards children and timers
	children map[string]*node
	timers   map[*time.Timer]struct{}
	tickers  map[*time.Ticker]chan struct{}
}

func (s *System) spawn(parent *node, p Props, do func(*actor.Props, string) (*actor.PID, error)) (Ref, error) {
	if p.New == nil {
		return Ref{}, fmt.Errorf("spawning %s %q: Props.New is nil", p.Kind, p.ID)
	}
	n := &node{kind: p.Kind, id: p.ID, parent: parent, props: p, started: time.Now(),
		children: map[string]*node{}}
	n.state.Store("starting")
	props := actor.PropsFromProducer(func() actor.Actor {
		return &adapter{sys: s, n: n, inner: p.New()}
	}, actor.WithSupervisor(&strategy{sys: s}))
	if p.Inline {
		props = props.Configure(actor.WithDispatcher(inlineDispatcher))
	}
	name := p.Kind
	if p.ID != "" {
		name += "-" + p.ID
	}
	pid, err := do(props, name)
	if err != nil {
		return Ref{}, fmt.Errorf("spawning %s %q: %w", p.Kind, p.ID, err)
	}
	// The node is registered by the actor itself when it starts and removed
	// when it stops, both on its own goroutine, so the two never race even
	// when a child stops before SpawnNamed has returned here.
	return Ref{pid}, nil
}

// register adds n to the registry; called on n's goroutine at its first
// Started.
func (s *System) register(n *node, pid *actor.PID) {
	s.mu.Lock()
	if n.pid != nil {
		s.mu.Unlock()
		return // a restart: already registered
	}
	n.pid = pid
	s.nodes[pid.Id] = n
	if n.parent == nil {
		s.tops = append(s.tops, n)
	}
	s.mu.Unlock()
	if n.parent != nil {
		n.parent.mu.Lock()
		n.parent.children[pid.Id] = n
		n.parent.mu.Unlock()
	}
}

func (s *System) forget(n *node) {
	if n.pid == nil {
		return
	}
	s.mu.Lock()
	delete(s.nodes, n.pid.Id)
	if n.parent == nil {
		for i, t := range s.tops {
			if t == n {
				s.tops = append(s.tops[:i], s.tops[i+1:]...)
				break
			}
		}
	}
	s.mu.Unlock()
	if n.parent != nil {
		n.parent.mu.Lock()
		delete(n.parent.children, n.pid.Id)
		n.parent.mu.Unlock()
	}
}

func (s *System) lookup(pid *actor.PID) *node {
	if pid == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[pid.Id]
}

// TreeNode is one actor in a Tree snapshot.
type TreeNode struct {
	Kind      string    `json:"kind"`
	ID        string    `json:"id"`
	State     string    `json:"state"`
	Restarts  int64     `json:"panic_restarts"` // times this actor was restarted after a panic
	StartedAt time.Time `json:"started_at"`
	// Info is what Props.Info said at the snapshot; absent when none.
	Info     any        `json:"info,omitempty"`
	Children []TreeNode `json:"children"`
	// LeftOff counts the children not listed (past Props.ListMax).
	LeftOff int `json:"children_left_off,omitempty"`
}

// Tree snapshots every live actor, top-level ones first in start order,
// children sorted by kind then id.
func (s *System) Tree() []TreeNode {
	s.mu.Lock()
	tops := append([]*node(nil), s.tops...)
	s.mu.Unlock()
	out := make([]TreeNode, 0, len(tops))
	for _, n := range tops {
		out = append(out, n.snapshot())
	}
	return out
}

func (n *node) snapshot() TreeNode {
	t := TreeNode{Kind: n.kind, ID: n.id, State: n.state.Load().(string),
		Restarts: n.restarts.Load(), StartedAt: n.started, Children: []TreeNode{}}
	if n.props.Info != nil {
		t.Info = n.props.Info()
	}
	n.mu.Lock()
	kids := make([]*node, 0, len(n.children))
	for _, c := range n.children {
		kids = append(kids, c)
	}
	n.mu.Unlock()
	sort.Slice(kids, func(i, j int) bool {
		if kids[i].kind != kids[j].kind {
			return kids[i].kind < kids[j].kind
		}
		return kids[i].id < kids[j].id
	})
	if max := n.props.ListMax; max > 0 && len(kids) > max {
		t.LeftOff = len(kids) - max
		kids = kids[:max]
	}
	for _, c := range kids {
		t.Children = append(t.Children, c.snapshot())
	}
	return t
}

func (n *node) cancelTimers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for t := range n.timers {
		t.Stop()
	}
	n.timers = nil
	for t, done := range n.tickers {
		t.Stop()
		close(done)
	}
	n.tickers = nil
}

// Panic is the reason handed to protoactor when an actor panics: the value
// and the stack captured where it happened.
type Panic struct {
	Value any
	Stack string
}

func (p *Panic) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// adapter turns an orchestrd Actor into a protoactor Actor.
type adapter struct {
	sys   *System
	n     *node
	inner Actor
}

func (a *adapter) Receive(pc actor.Context) {
	var msg any
	switch m := pc.Message().(type) {
	case *actor.Started:
		a.sys.register(a.n, pc.Self())
		if a.n.restarts.Load() > 0 && a.sys.opts.OnRestart != nil {
			a.sys.opts.OnRestart(a.n.kind, a.n.id, int(a.n.restarts.Load()))
		}
		a.n.state.Store("running")
		msg = Started{}
	case *actor.Stopping:
		a.n.state.Store("stopping")
		msg = Stopping{}
	case *actor.Stopped:
		a.n.cancelTimers()
		a.sys.forget(a.n)
		msg = Stopped{}
	case *actor.Restarting:
		a.n.cancelTimers()
		a.n.restarts.Add(1)
		a.n.state.Store("restarting")
		msg = Restarting{}
	case *actor.Terminated:
		msg = Terminated{Who: Ref{m.Who}}
	case actor.SystemMessage, actor.AutoReceiveMessage:
		return
	default:
		msg = m
	}
	c := Context{pc: pc, sys: a.sys, n: a.n, msg: msg}
	defer func() {
		if r := recover(); r != nil {
			if _, stopped := msg.(Stopped); stopped {
				// Nothing left to supervise; report and swallow.
				a.report(r, Stop)
				return
			}
			panic(&Panic{Value: r, Stack: string(debug.Stack())})
		}
	}()
	a.inner.Receive(&c)
}

func (a *adapter) report(v any, d Directive) {
	if a.sys.opts.OnPanic != nil {
		a.sys.opts.OnPanic(PanicInfo{Kind: a.n.kind, ID: a.n.id, Value: v,
			Stack: string(debug.Stack()), Directive: d})
	}
}

// strategy is the supervisor strategy of every orchestrd actor: report the
// panic, then restart or stop the child as its Props say, stopping instead
// once it exceeds its restart intensity.
type strategy struct{ sys *System }

func (st *strategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID,
	rs *actor.RestartStatistics, reason any, _ any) {
	n := st.sys.lookup(child)
	d := Stop
	info := PanicInfo{Value: reason}
	if p, ok := reason.(*Panic); ok {
		info.Value, info.Stack = p.Value, p.Stack
	}
	if n != nil {
		info.Kind, info.ID = n.kind, n.id
		d = n.props.OnPanic
		if d == Restart {
			max, within := n.props.MaxRestarts, n.props.Within
			if max <= 0 {
				max = 5
			}
			if within <= 0 {
				within = 10 * time.Second
			}
			rs.Fail()
			if rs.NumberOfFailures(within) > max {
				d = Stop
			}
		}
	}
	info.Directive = d
	if st.sys.opts.OnPanic != nil {
		st.sys.opts.OnPanic(info)
	}
	if d == Restart {
		sup.RestartChildren(child)
	} else {
		sup.StopChildren(child)
	}
}

// renameMessage keeps protoactor's slog attributes named "message" from
// colliding with zerolog's own message field.
type renameMessage struct{ slog.Handler }

func (h renameMessage) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == zerolog.MessageFieldName {
			a.Key = "actor_message"
		}
		nr.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, nr)
}

func (h renameMessage) WithAttrs(as []slog.Attr) slog.Handler {
	for i := range as {
		if as[i].Key == zerolog.MessageFieldName {
			as[i].Key = "actor_message"
		}
	}
	return renameMessage{h.Handler.WithAttrs(as)}
}

func (h renameMessage) WithGroup(name string) slog.Handler {
	return renameMessage{h.Handler.WithGroup(name)}
}
