package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// busSink hands every logged event line to the publisher, never blocking:
// a full queue drops the line (counted in cluster.stopped's
// events_dropped).
type busSink struct{ f *Fleet }

func (s busSink) Deliver(r *eventlog.Record) {
	if r.Line == nil { // ephemeral: job output and the like stay local
		return
	}
	select {
	case s.f.evq <- r.Line:
	default:
		s.f.evDropped.Add(1)
	}
}

func (busSink) EventsOnly() {}

// lastFlush bounds publishing the last event lines when the node leaves.
const lastFlush = 2 * time.Second

// publishEvents publishes the queued event lines on
// orchestrd.events.<node> into the events stream: the lines queued
// together in one message, newline-separated (at most eventsBatch bytes
// but for a longer line alone), so that a burst of a job's events is one
// replicated write; asynchronously, at most eventsWindow messages
// unacknowledged; a message the stream did not take (no responders while
// its leader is elected) is sent again, synchronously, with retries; the
// lines of what still fails are counted as dropped.
func (f *Fleet) publishEvents() {
	defer f.wg.Done()
	subj := eventsSubjPfx + f.name
	var pending []jetstream.PubAckFuture
	// Once the fleet is left, the last lines get lastFlush in all: a
	// fleet without a quorum acknowledges nothing, and the daemon's stop
	// must not wait on it.
	var until time.Time
	dropped := func(data []byte) { f.evDropped.Add(uint64(bytes.Count(data, []byte{'\n'}) + 1)) }
	settle := func() {
		for _, fut := range pending {
			wait := 2 * opTimeout
			if !until.IsZero() {
				wait = max(time.Until(until), time.Millisecond)
			}
			select {
			case <-fut.Ok():
				continue
			case <-fut.Err():
			case <-time.After(wait):
			}
			if !f.nc.IsConnected() || !until.IsZero() && time.Now().After(until) {
				dropped(fut.Msg().Data)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			_, err := f.js.PublishMsg(ctx, fut.Msg(), jetstream.WithRetryAttempts(10), jetstream.WithRetryWait(100*time.Millisecond))
			cancel()
			if err != nil {
				dropped(fut.Msg().Data)
			}
		}
		pending = pending[:0]
	}
	var batch []byte
	flush := func() {
		if len(batch) == 0 {
			return
		}
		fut, err := f.js.PublishAsync(subj, batch)
		if err != nil {
			dropped(batch)
		} else {
			pending = append(pending, fut)
		}
		batch = nil // the message holds it until acknowledged
		if len(pending) >= eventsWindow {
			settle()
		}
	}
	add := func(line []byte) {
		if len(batch) > 0 && len(batch)+1+len(line) > eventsBatch {
			flush()
		}
		if len(batch) > 0 {
			batch = append(batch, '\n')
		}
		batch = append(batch, line...)
	}
	for {
		select {
		case line := <-f.evq:
			add(line)
			continue
		default:
		}
		flush()
		settle()
		select {
		case line := <-f.evq:
			add(line)
		case <-f.ctx.Done():
			// The lines queued until now (cluster.stopped among them).
			until = time.Now().Add(lastFlush)
			for {
				select {
				case line := <-f.evq:
					add(line)
				default:
					flush()
					settle()
					return
				}
			}
		}
	}
}

// eventLines calls fn with each line of an events message (one line, or
// several that one node published together).
func eventLines(data []byte, fn func(line []byte)) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) > 0 {
			fn(line)
		}
	}
}

// Register registers cluster.nodes and cluster.events.
func (f *Fleet) Register(mux api.Mux) {
	mux.Handle("cluster.nodes", f.nodesMethod)
	mux.Handle("cluster.events", f.eventsMethod)
}

// NodeStatus is a node as cluster.nodes lists it.
type NodeStatus struct {
	Name        string         `json:"name"`
	Incarnation string         `json:"incarnation"`
	State       string         `json:"state"` // alive, lost, stopped
	Lanes       []string       `json:"lanes"`
	Free        map[string]int `json:"free,omitempty"`
	StartedAt   time.Time      `json:"started_at"`
	HeartbeatAt time.Time      `json:"heartbeat_at"` // the node's own clock
	// SeenMsAgo: how long ago this node saw its last heartbeat (this
	// node's clock).
	SeenMsAgo int64  `json:"seen_ms_ago"`
	LostBy    string `json:"lost_by,omitempty"`
	Self      bool   `json:"self,omitempty"`
}

// Nodes lists the fleet's nodes as this node sees them, by name.
func (f *Fleet) Nodes() []NodeStatus {
	f.mu.Lock()
	out := make([]NodeStatus, 0, len(f.peers))
	for k, p := range f.peers {
		out = append(out, NodeStatus{Name: p.info.Name, Incarnation: p.info.Incarnation, State: p.info.State,
			Lanes: p.info.Lanes, Free: p.info.Free, StartedAt: p.info.StartedAt, HeartbeatAt: p.info.HeartbeatAt,
			SeenMsAgo: time.Since(p.seen).Milliseconds(), LostBy: p.info.LostBy, Self: k == f.name})
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *Fleet) nodesMethod(call api.Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	call.Respond(struct {
		Node  string       `json:"node"`
		Nodes []NodeStatus `json:"nodes"`
	}{f.name, f.Nodes()})
}

// eventsParams are cluster.events' params.
type eventsParams struct {
	Follow bool   `json:"follow,omitempty"`
	Node   string `json:"node,omitempty"` // one node's events only
	// Last: the last this many lines before following (default 1000,
	// at most 100000; with follow, 0 is none).
	Last *int `json:"last,omitempty"`
}

const (
	defaultEventsLast = 1000
	maxEventsLast     = 100_000
	eventsInFlight    = 8
	eventsWindow      = 256
	eventsBatch       = 64 << 10 // bytes of event lines in one message
)

// eventsMethod is cluster.events: the fleet's event lines, each pushed as
// its kind (as events.subscribe pushes them) with the node's log line as
// data, "origin" (the node's name) first; without follow it answers {lines} after the
// last, with follow it goes on until the client goes away.
func (f *Fleet) eventsMethod(call api.Call) {
	sc, ok := call.(api.StreamCall)
	if !ok {
		call.Fail(api.Errorf(api.CodeInvalidRequest, "cluster.events needs a connection that streams (the control socket)"))
		return
	}
	var p eventsParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	last := defaultEventsLast
	if p.Last != nil {
		last = *p.Last
	}
	if last < 0 || last > maxEventsLast {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for cluster.events: last must be 0 to %d", maxEventsLast))
		return
	}
	if p.Node != "" && !validName(p.Node) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for cluster.events: %q is not a node name", p.Node))
		return
	}
	ctx, cancel := context.WithCancel(f.ctx)
	sc.OnClose(cancel)
	go func() {
		defer cancel()
		n, err := f.streamEvents(ctx, sc, p, last)
		switch {
		case err != nil && ctx.Err() == nil:
			call.Fail(api.Errorf(api.CodeInternal, "reading the fleet's events: %v", err))
		case err == nil:
			call.Respond(struct {
				Lines int `json:"lines"`
			}{n})
		}
	}()
}

func (f *Fleet) streamEvents(ctx context.Context, sc api.StreamCall, p eventsParams, last int) (int, error) {
	subj := eventsSubjPfx + ">"
	if p.Node != "" {
		subj = eventsSubjPfx + p.Node
	}
	ictx, icancel := context.WithTimeout(ctx, opTimeout)
	info, err := f.evs.Info(ictx, jetstream.WithSubjectFilter(subj))
	icancel()
	if err != nil {
		return 0, err
	}
	end := info.State.LastSeq
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}}
	switch {
	case p.Follow && (last == 0 || info.State.Msgs == 0):
		// From the first line after the stream's end now (none missed
		// between reading its end and following).
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, end+1
	case last == 0 || info.State.Msgs == 0:
		return 0, nil
	default:
		// The last `last` lines of the subject: counted back from the
		// end of the stream (an estimate when other nodes' lines are
		// interleaved: at least last of them come when they exist).
		start := uint64(1)
		if end > uint64(last) {
			start = end - uint64(last) + 1
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, max(start, info.State.FirstSeq)
	}
	cfg.MaxResetAttempts = maxResets
	c, err := f.js.OrderedConsumer(ctx, eventsStream, cfg)
	if err != nil {
		return 0, err
	}
	slots := make(chan struct{}, eventsInFlight)
	n := 0
	push := func(l evLine) bool {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		sc.Push(l.kind, l.data, func(ok bool) {
			<-slots
		})
		n++
		return true
	}
	// The history (messages up to end) is held to its last `last` lines,
	// then pushed: a message may hold several lines, so counting back by
	// messages gives more than asked for. What comes after is pushed as it
	// comes.
	h := &lastLines{max: last, holding: cfg.OptStartSeq <= end}
	for {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		batch, done, err := fetch(ctx, c, 64, 500*time.Millisecond)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		got := 0
		stopped := false
		for msg := range batch.Messages() {
			got++
			md, _ := msg.Metadata()
			live := md != nil && md.Sequence.Stream > end
			if live && h.holding && !h.flush(push) {
				stopped = true
				break
			}
			node := strings.TrimPrefix(msg.Subject(), eventsSubjPfx)
			eventLines(msg.Data(), func(line []byte) {
				kind, data, ok := withOrigin(node, line)
				switch {
				case !ok || stopped:
				case h.holding:
					h.add(evLine{kind, data})
				case !push(evLine{kind, data}):
					stopped = true
				}
			})
			if stopped {
				break
			}
			if md != nil && md.Sequence.Stream >= end {
				if h.holding && !h.flush(push) {
					stopped = true
					break
				}
				if !p.Follow {
					done()
					return n, nil
				}
			}
		}
		done()
		if stopped {
			return n, ctx.Err()
		}
		if got == 0 {
			// Caught up: what is held is all the history there is.
			if h.holding && !h.flush(push) {
				return n, ctx.Err()
			}
			if !p.Follow {
				return n, nil
			}
		}
	}
}

// evLine is an event line as cluster.events pushes it.
type evLine struct {
	kind string
	data []byte
}

// lastLines keeps the last max lines added (a ring), until flushed.
type lastLines struct {
	max     int
	holding bool
	lines   []evLine
	head    int // the oldest, once full
}

func (h *lastLines) add(l evLine) {
	if h.max <= 0 {
		return
	}
	if len(h.lines) < h.max {
		h.lines = append(h.lines, l)
		return
	}
	h.lines[h.head] = l
	h.head = (h.head + 1) % h.max
}

// flush pushes what is held, oldest first, and holds no more; false if
// a push was refused (the call went).
func (h *lastLines) flush(push func(evLine) bool) bool {
	h.holding = false
	lines := append(h.lines[h.head:len(h.lines):len(h.lines)], h.lines[:h.head]...)
	h.lines, h.head = nil, 0
	for _, l := range lines {
		if !push(l) {
			return false
		}
	}
	return true
}

// withOrigin checks an event line read from the fleet (any node wrote it)
// and returns its kind and the line with "origin":node first.
func withOrigin(node string, line []byte) (string, []byte, bool) {
	if !validName(node) || len(line) < 2 || line[0] != '{' || !wire.ValidJSON(line) {
		return "", nil, false
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(line, &head); err != nil || head.Kind == "" || len(head.Kind) > 128 {
		return "", nil, false
	}
	out := make([]byte, 0, len(line)+len(node)+16)
	out = append(out, `{"origin":`...)
	out = wire.AppendJSONString(out, node, false)
	rest := strings.TrimSpace(string(line[1:]))
	if rest != "}" {
		out = append(out, ',')
	}
	out = append(out, rest...)
	return head.Kind, out, true
}
