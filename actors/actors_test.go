package actors

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor starts this timer goroutine when it logs a dead letter
		// (a message to an actor these tests stopped) and it ends by itself
		// a second later: on a loaded machine, after goleak stops waiting.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

type probe struct {
	got   chan any
	onMsg func(c *Context)
}

func (p *probe) Receive(c *Context) {
	if p.onMsg != nil {
		p.onMsg(c)
	}
	p.got <- c.Message()
}

func waitFor[T any](t *testing.T, ch <-chan any) T {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-ch:
			if v, ok := m.(T); ok {
				return v
			}
		case <-deadline:
			var zero T
			t.Fatalf("timed out waiting for %T", zero)
			return zero
		}
	}
}

func newSystem(t *testing.T) (*System, chan PanicInfo) {
	panics := make(chan PanicInfo, 8)
	s := NewSystem(Options{Logger: zerolog.Nop(), OnPanic: func(p PanicInfo) { panics <- p }})
	t.Cleanup(s.Shutdown)
	return s, panics
}

type boom struct{}

func TestPanicIsContainedAndRestarts(t *testing.T) {
	s, panics := newSystem(t)
	got := make(chan any, 64)
	var mu sync.Mutex
	incarnations := 0
	ref, err := s.Spawn(Props{Kind: "test", ID: "a", New: func() Actor {
		mu.Lock()
		incarnations++
		mu.Unlock()
		return &probe{got: got, onMsg: func(c *Context) {
			if _, ok := c.Message().(boom); ok {
				panic("kaboom")
			}
		}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor[Started](t, got)
	s.Send(ref, boom{})
	p := <-panics
	if p.Kind != "test" || p.ID != "a" || p.Value != "kaboom" || p.Directive != Restart {
		t.Fatalf("panic info = %+v", p)
	}
	if p.Stack == "" {
		t.Fatal("panic info has no stack")
	}
	waitFor[Started](t, got)
	mu.Lock()
	if incarnations != 2 {
		t.Fatalf("incarnations = %d, want 2", incarnations)
	}
	mu.Unlock()
	tree := s.Tree()
	if len(tree) != 1 || tree[0].Restarts != 1 || tree[0].State != "running" {
		t.Fatalf("tree = %+v", tree)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if len(s.Tree()) != 0 {
		t.Fatalf("tree after stop = %+v", s.Tree())
	}
}

func TestStopDirectiveAndChildTree(t *testing.T) {
	s, panics := newSystem(t)
	got := make(chan any, 64)
	childGot := make(chan any, 64)
	parent, err := s.Spawn(Props{Kind: "parent", ID: "p", New: func() Actor {
		return &probe{got: got, onMsg: func(c *Context) {
			if _, ok := c.Message().(Started); ok {
				_, err := c.Spawn(Props{Kind: "child", ID: "c", OnPanic: Stop, New: func() Actor {
					return &probe{got: childGot, onMsg: func(c *Context) {
						if _, ok := c.Message().(boom); ok {
							panic("child boom")
						}
						if _, ok := c.Message().(Started); ok {
							c.SetState("busy")
						}
					}}
				}})
				if err != nil {
					panic(err)
				}
			}
			if r, ok := c.Message().(Ref); ok {
				c.Send(r, boom{})
			}
		}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor[Started](t, childGot)
	tree := s.Tree()
	if len(tree) != 1 || len(tree[0].Children) != 1 || tree[0].Children[0].Kind != "child" ||
		tree[0].Children[0].State != "busy" {
		t.Fatalf("tree = %+v", tree)
	}
	// Find the child's ref through the parent's Terminated later: send boom
	// via the parent, which knows it by name.
	var child Ref
	s.mu.Lock()
	for _, n := range s.nodes {
		if n.kind == "child" {
			child = Ref{n.pid}
		}
	}
	s.mu.Unlock()
	s.Send(parent, child)
	if p := <-panics; p.Directive != Stop || p.Value != "child boom" {
		t.Fatalf("panic = %+v", p)
	}
	term := waitFor[Terminated](t, got)
	if !term.Who.Equal(child) {
		t.Fatalf("terminated %v, want %v", term.Who, child)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx, parent); err != nil {
		t.Fatal(err)
	}
}

type tick struct{}

func TestTimersStopWithActor(t *testing.T) {
	s, _ := newSystem(t)
	got := make(chan any, 64)
	ref, err := s.Spawn(Props{Kind: "timer", New: func() Actor {
		return &probe{got: got, onMsg: func(c *Context) {
			if _, ok := c.Message().(Started); ok {
				c.Every(time.Millisecond, tick{})
				c.After(time.Hour, "never")
			}
		}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor[tick](t, got)
	waitFor[tick](t, got)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx, ref); err != nil {
		t.Fatal(err)
	}
	// goleak in TestMain proves the ticker goroutine and timers are gone.
}

// Props.Info is shown in the tree; Props.ListMax bounds the children
// listed, counting the rest.
func TestTreeInfoAndListMax(t *testing.T) {
	s, _ := newSystem(t)
	got := make(chan any, 8)
	var kids []Ref
	parent, err := s.Spawn(Props{Kind: "conns", ListMax: 2, New: func() Actor {
		return &probe{got: got, onMsg: func(c *Context) {
			if _, ok := c.Message().(Started); !ok {
				return
			}
			for _, id := range []string{"a", "b", "c"} {
				r, err := c.Spawn(Props{Kind: "conn", ID: id, Info: func() any { return "peer " + id },
					New: func() Actor { return &probe{got: make(chan any, 8)} }})
				if err != nil {
					panic(err)
				}
				kids = append(kids, r)
			}
		}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor[Started](t, got)
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr := s.Tree()
		if len(tr) == 1 && len(tr[0].Children)+tr[0].LeftOff == 3 {
			if len(tr[0].Children) != 2 || tr[0].LeftOff != 1 || tr[0].Children[0].Info != "peer a" {
				t.Fatalf("tree %+v, want 2 children listed (a first, its info), 1 left off", tr[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree %+v", tr)
		}
		time.Sleep(5 * time.Millisecond) // polling the tree, not for correctness
	}
	if err := s.Stop(context.Background(), parent); err != nil {
		t.Fatal(err)
	}
}
