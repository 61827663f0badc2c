package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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
// unacknowledged. A message the stream did not take (its leader being
// elected, a server lost, the connection down) is sent again, in order,
// every retryPause for up to eventsRetryFor (lastFlush once the node
// leaves), under the same Nats-Msg-Id, so that one stored after all is
// not stored twice; meanwhile the lines wait in the queue, whose
// overflow is dropped. The lines of what still fails are dropped too:
// every drop is told, once the stream takes lines again, as
// cluster.events_dropped (and in cluster.stopped's total).
func (f *Fleet) publishEvents() {
	defer f.wg.Done()
	subj := eventsSubjPfx + f.name
	var pending []jetstream.PubAckFuture
	// Once the fleet is left, the last lines get lastFlush in all: a
	// fleet without a quorum acknowledges nothing, and the daemon's stop
	// must not wait on it.
	var until time.Time
	var sent uint64 // messages published, for their ids
	var told uint64 // drops told in cluster.events_dropped
	dropped := func(data []byte) { f.evDropped.Add(uint64(bytes.Count(data, []byte{'\n'}) + 1)) }
	// resend publishes m until the stream takes it or deadline passes
	// (see above): the deadline is one for every message a settle sends
	// again, so that a stream down for long costs each one try, not
	// eventsRetryFor each.
	resend := func(m *nats.Msg, deadline time.Time) bool {
		for {
			if !until.IsZero() && deadline.After(until) {
				deadline = until
			}
			wait := max(time.Until(deadline), time.Millisecond)
			if f.nc.IsConnected() {
				base := f.ctx // a stop cuts a wait short; then lastFlush's tries
				if !until.IsZero() {
					base = context.Background()
				}
				ctx, cancel := context.WithTimeout(base, min(opTimeout, wait))
				_, err := f.js.PublishMsg(ctx, m)
				cancel()
				if err == nil {
					return true
				}
			}
			if !time.Now().Before(deadline) {
				return false
			}
			pause := time.After(min(retryPause, wait))
			if !until.IsZero() {
				<-pause
				continue
			}
			select {
			case <-f.ctx.Done(): // leaving: lastFlush at most from now
				until = time.Now().Add(lastFlush)
			case <-pause:
			}
		}
	}
	settle := func() {
		clean := true
		var deadline time.Time // set at the first message sent again
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
			if deadline.IsZero() {
				deadline = time.Now().Add(eventsRetryFor)
			}
			if !resend(fut.Msg(), deadline) {
				dropped(fut.Msg().Data)
				clean = false
			}
		}
		pending = pending[:0]
		// Drops told once lines go through again (the event then
		// likely finds room in the queue).
		if d := f.evDropped.Load(); clean && d > told && until.IsZero() {
			f.log.Warn().Uint64("lines", d-told).Msg("event lines were not published to the fleet (they are in this node's own event log)")
			f.emit(ClusterEventsDropped{Node: f.name, Lines: d - told, Total: d})
			told = d
		}
	}
	var batch []byte
	flush := func() {
		if len(batch) == 0 {
			return
		}
		sent++
		m := nats.NewMsg(subj)
		m.Data = batch
		m.Header.Set(jetstream.MsgIDHeader, f.inc+"-"+strconv.FormatUint(sent, 10))
		fut, err := f.js.PublishMsgAsync(m)
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
		for f.pubPaused.Load() && f.ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
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
			// The lines queued until now (cluster.stopped among them),
			// within the one lastFlush from when the stop was noticed
			// (resend may have noticed it first).
			if until.IsZero() {
				until = time.Now().Add(lastFlush)
			}
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
	Name        string   `json:"name"`
	Incarnation string   `json:"incarnation"`
	State       string   `json:"state"` // alive, lost, stopped
	Lanes       []string `json:"lanes"`
	// Free: the free slots of each lane of a node alive; none of a node
	// lost or stopped.
	Free        map[string]int `json:"free,omitempty"`
	StartedAt   time.Time      `json:"started_at"`
	HeartbeatAt time.Time      `json:"heartbeat_at"` // the node's own clock
	// SeenMsAgo: how long ago this node saw its last heartbeat (this
	// node's clock).
	SeenMsAgo int64  `json:"seen_ms_ago"`
	LostBy    string `json:"lost_by,omitempty"`
	// LostAt: when LostBy declared it lost (LostBy's clock; unset when a
	// node of an older version did).
	LostAt time.Time `json:"lost_at,omitzero"`
	Self   bool      `json:"self,omitempty"`
	// Figures: a node alive's figures from its last heartbeat.
	Figures *api.NodeFigures `json:"figures,omitempty"`
}

// Nodes lists the fleet's nodes as this node sees them, by name.
func (f *Fleet) Nodes() []NodeStatus {
	f.mu.Lock()
	out := make([]NodeStatus, 0, len(f.peers))
	for k, p := range f.peers {
		n := NodeStatus{Name: p.info.Name, Incarnation: p.info.Incarnation, State: p.info.State,
			Lanes: p.info.Lanes, Free: p.info.Free, StartedAt: p.info.StartedAt, HeartbeatAt: p.info.HeartbeatAt,
			SeenMsAgo: time.Since(p.seen).Milliseconds(), LostBy: p.info.LostBy, LostAt: p.info.LostAt, Self: k == f.name,
			Figures: p.info.Figures}
		if n.State != nodeAlive {
			n.Free, n.Figures = nil, nil // its last heartbeat's: no slot is free on a node that is gone
		}
		out = append(out, n)
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NodesAnswer is cluster.nodes' answer: the fleet (Cluster), this node,
// how it reaches NATS, and every node.
type NodesAnswer struct {
	Cluster string       `json:"cluster"`
	Node    string       `json:"node"`
	Mode    string       `json:"mode"` // embedded, external
	URL     string       `json:"url"`
	Nodes   []NodeStatus `json:"nodes"`
}

func (f *Fleet) nodesMethod(call api.Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	call.Respond(NodesAnswer{Cluster: f.Cluster(), Node: f.name, Mode: f.mode, URL: f.url, Nodes: f.Nodes()})
}

// eventsParams are cluster.events' params.
type eventsParams struct {
	Follow bool   `json:"follow,omitempty"`
	Node   string `json:"node,omitempty"` // one node's events only
	// Last: the last this many lines before following (default 1000,
	// at most 100000; with follow, 0 is none), of the lines the filter
	// below passes.
	Last *int `json:"last,omitempty"`
	// The filter, as `orchestrd events` gives it (eventlog.Query): kinds
	// (exact, "*" or "prefix.*"), kinds excluded, a lane, a job, a time.
	eventlog.Filter
}

// maxEventsPatterns bounds kinds and exclude, each; maxEventsPattern, one.
const (
	maxEventsPatterns = 64
	maxEventsPattern  = 128
)

// matcher is p's filter, or why it is not one.
func (p eventsParams) matcher() (func(*eventlog.Line) bool, error) {
	for _, l := range [][]string{p.Kinds, p.Exclude} {
		if len(l) > maxEventsPatterns {
			return nil, fmt.Errorf("at most %d kinds", maxEventsPatterns)
		}
		for _, k := range l {
			if k == "" || len(k) > maxEventsPattern {
				return nil, fmt.Errorf("a kind is 1 to %d bytes", maxEventsPattern)
			}
		}
	}
	if len(p.Lane) > maxEventsPattern || len(p.Job) > maxEventsPattern {
		return nil, fmt.Errorf("lane and job are at most %d bytes", maxEventsPattern)
	}
	return p.Query().Matcher(), nil
}

const (
	defaultEventsLast = 1000
	maxEventsLast     = 100_000
	eventsInFlight    = 8
	eventsWindow      = 256
	eventsBatch       = 64 << 10 // bytes of event lines in one message
	// eventsRetryFor bounds how long a message of event lines the stream
	// did not take is sent again (an election after a server's loss takes
	// seconds).
	eventsRetryFor = 30 * time.Second
	// eventsStall bounds how long a read of past event lines waits on a
	// consumer that delivers nothing while its count says more is there (a
	// starved machine, an election): past it the read fails, rather than
	// answer with the lines it has as if they were all.
	eventsStall = time.Minute
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
	match, err := p.matcher()
	if err != nil {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for cluster.events: %v", err))
		return
	}
	ctx, cancel := context.WithCancel(f.ctx)
	sc.OnClose(cancel)
	go func() {
		defer cancel()
		n, err := f.streamEvents(ctx, sc, p, last, match)
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

func (f *Fleet) streamEvents(ctx context.Context, sc api.StreamCall, p eventsParams, last int, match func(*eventlog.Line) bool) (int, error) {
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
	end, first := info.State.LastSeq, max(info.State.FirstSeq, 1)
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
	if last > 0 && info.State.Msgs > 0 {
		// The last `last` lines the filter passes, up to end: read back
		// from end over last messages, then four times as many, until
		// that many lines came or the stream's start was read (a message
		// holds one line or several; a node's or a kind's lines are
		// interleaved with others).
		for span := uint64(last); ; span *= 4 {
			start := first
			if end >= span && end-span+1 > first {
				start = end - span + 1
			}
			lines, err := f.readEvents(ctx, subj, start, end, match, last)
			if err != nil {
				return n, err
			}
			if len(lines) >= last || start <= first || span >= end {
				for _, l := range lines {
					if !push(l) {
						return n, ctx.Err()
					}
				}
				break
			}
		}
	}
	if !p.Follow {
		return n, nil
	}
	// From the first line after end (none missed between reading end and
	// following), each as it comes.
	c, err := f.js.OrderedConsumer(ctx, eventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: end + 1, MaxResetAttempts: maxResets})
	if err != nil {
		return n, err
	}
	for {
		batch, done, err := fetch(ctx, c, 64, 500*time.Millisecond)
		if err != nil {
			select {
			case <-ctx.Done():
				return n, ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		stopped := false
		for msg := range batch.Messages() {
			node := strings.TrimPrefix(msg.Subject(), eventsSubjPfx)
			eventLines(msg.Data(), func(line []byte) {
				if l, ok := matchedLine(node, line, match); ok && !stopped && !push(l) {
					stopped = true
				}
			})
			if stopped {
				break
			}
		}
		done()
		if stopped || ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
}

// readEvents reads subj's event lines from start to end and returns the
// last max of them that match passes, oldest first.
func (f *Fleet) readEvents(ctx context.Context, subj string, start, end uint64, match func(*eventlog.Line) bool, max int) ([]evLine, error) {
	c, err := f.js.OrderedConsumer(ctx, eventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start, MaxResetAttempts: maxResets})
	if err != nil {
		return nil, err
	}
	h := &lastLines{max: max}
	var stalled time.Time // since when nothing came, while more was pending
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		batch, done, err := fetch(ctx, c, 64, 500*time.Millisecond)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		got, atEnd := 0, false
		for msg := range batch.Messages() {
			got++
			md, _ := msg.Metadata()
			if md != nil && md.Sequence.Stream > end {
				atEnd = true
				break
			}
			node := strings.TrimPrefix(msg.Subject(), eventsSubjPfx)
			eventLines(msg.Data(), func(line []byte) {
				if l, ok := matchedLine(node, line, match); ok {
					h.add(l)
				}
			})
			// At end, or nothing more of subj now (end's message is
			// another node's).
			if md != nil && (md.Sequence.Stream >= end || md.NumPending == 0) {
				atEnd = true
				break
			}
		}
		done()
		if atEnd {
			return h.take(), nil
		}
		if got > 0 {
			stalled = time.Time{}
			continue
		}
		// Nothing came: none of subj from start on, or a consumer slow to
		// start or starved; its own counts say which. One that sent
		// messages the client did not take in before the pull's wait
		// ended counts none pending too: the next fetch asks for them
		// again (a new consumer from the last message taken).
		ictx, cancel := context.WithTimeout(ctx, opTimeout)
		ci, err := c.Info(ictx)
		cancel()
		if err == nil && ci.NumPending == 0 && ci.Delivered.Consumer == 0 {
			return h.take(), nil
		}
		if stalled.IsZero() {
			stalled = time.Now()
		} else if time.Since(stalled) > eventsStall {
			if err == nil {
				err = fmt.Errorf("%d messages pending, %d sent and not taken in", ci.NumPending, ci.Delivered.Consumer)
			}
			return nil, fmt.Errorf("reading the fleet's events: nothing delivered for %s: %w", eventsStall, err)
		}
	}
}

// matchedLine is line from node as cluster.events pushes it, if it is an
// event line and match passes it.
func matchedLine(node string, line []byte, match func(*eventlog.Line) bool) (evLine, bool) {
	kind, data, ok := withOrigin(node, line)
	if !ok {
		return evLine{}, false
	}
	if l, err := eventlog.ParseLine(line); err != nil || !match(&l) {
		return evLine{}, false
	}
	return evLine{kind, data}, true
}

// evLine is an event line as cluster.events pushes it.
type evLine struct {
	kind string
	data []byte
}

// lastLines keeps the last max lines added (a ring).
type lastLines struct {
	max   int
	lines []evLine
	head  int // the oldest, once full
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

// take returns what is kept, oldest first, and keeps nothing more.
func (h *lastLines) take() []evLine {
	lines := append(h.lines[h.head:len(h.lines):len(h.lines)], h.lines[:h.head]...)
	h.lines, h.head = nil, 0
	return lines
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
