package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Context is what Receive sees: the current message and what the actor may
// do. It is valid only during the Receive call it was passed to.
type Context struct {
	pc  actor.Context
	sys *System
	n   *node
	msg any
}

// Message is the message being handled.
func (c *Context) Message() any { return c.msg }

// Self is this actor.
func (c *Context) Self() Ref { return Ref{c.pc.Self()} }

// Parent is this actor's supervisor (zero for top-level actors).
func (c *Context) Parent() Ref { return Ref{c.pc.Parent()} }

// Sender is who sent the current message with Request (zero otherwise).
func (c *Context) Sender() Ref { return Ref{c.pc.Sender()} }

// System is the actor system this actor runs in.
func (c *Context) System() *System { return c.sys }

// Kind and ID name this actor.
func (c *Context) Kind() string { return c.n.kind }
func (c *Context) ID() string   { return c.n.id }

// Send delivers msg to r. It never blocks.
func (c *Context) Send(r Ref, msg any) {
	if r.pid != nil {
		c.pc.Send(r.pid, msg)
	}
}

// Request delivers msg to r with this actor as the sender, for Reply.
func (c *Context) Request(r Ref, msg any) {
	if r.pid != nil {
		c.pc.Request(r.pid, msg)
	}
}

// Reply answers the sender of the current message.
func (c *Context) Reply(msg any) {
	if s := c.pc.Sender(); s != nil {
		c.pc.Send(s, msg)
	}
}

// Spawn starts a child supervised by this actor.
func (c *Context) Spawn(p Props) (Ref, error) {
	return c.sys.spawn(c.n, p, func(props *actor.Props, name string) (*actor.PID, error) {
		return c.pc.SpawnNamed(props, name)
	})
}

// Stop stops r (normally a child) and its descendants; its parent then
// receives Terminated.
func (c *Context) Stop(r Ref) {
	if r.pid != nil {
		c.pc.Stop(r.pid)
	}
}

// StopSelf stops this actor after the current message.
func (c *Context) StopSelf() { c.pc.Stop(c.pc.Self()) }

// Watch asks for a Terminated message when r stops.
func (c *Context) Watch(r Ref) {
	if r.pid != nil {
		c.pc.Watch(r.pid)
	}
}

// SetState sets the state shown for this actor in Tree.
func (c *Context) SetState(s string) { c.n.state.Store(s) }

// Restarts is how many times this actor has been restarted after a panic.
func (c *Context) Restarts() int { return int(c.n.restarts.Load()) }

// After sends msg to Self once, after d, unless cancelled or the actor stops
// first. The returned func cancels it.
func (c *Context) After(d time.Duration, msg any) (cancel func()) {
	n, sys, self := c.n, c.sys, c.pc.Self()
	var t *time.Timer
	n.mu.Lock()
	t = time.AfterFunc(d, func() {
		n.mu.Lock()
		_, live := n.timers[t]
		delete(n.timers, t)
		n.mu.Unlock()
		if live {
			sys.root.Send(self, msg)
		}
	})
	if n.timers == nil {
		n.timers = map[*time.Timer]struct{}{}
	}
	n.timers[t] = struct{}{}
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		delete(n.timers, t)
		n.mu.Unlock()
		t.Stop()
	}
}

// Every sends msg to Self every d until cancelled or the actor stops.
func (c *Context) Every(d time.Duration, msg any) (cancel func()) {
	n, sys, self := c.n, c.sys, c.pc.Self()
	t := time.NewTicker(d)
	done := make(chan struct{})
	n.mu.Lock()
	if n.tickers == nil {
		n.tickers = map[*time.Ticker]chan struct{}{}
	}
	n.tickers[t] = done
	n.mu.Unlock()
	go func() {
		for {
			select {
			case <-t.C:
				sys.root.Send(self, msg)
			case <-done:
				return
			}
		}
	}()
	return func() {
		n.mu.Lock()
		if _, ok := n.tickers[t]; ok {
			delete(n.tickers, t)
			t.Stop()
			close(done)
		}
		n.mu.Unlock()
	}
}
