// Package telegram is the bot side of vibe-reachout, in the daemon: every
// pending approval (a hook's, an agent's tool call, a plan gate, a merge)
// goes to the allowed Telegram chats with inline buttons; a tap answers it
// as any other door does, and whoever answers first wins: every chat's
// message is then edited to say what was decided, by whom and when.
//
// The bot is an actor under the approvals supervisor. Its Bot API calls
// run off the actor, their results come back as messages. Updates come by
// long polling getUpdates; the next offset is kept in the store only once
// the answers of a batch are recorded, so a restart neither loses nor
// replays a tap. What could not be sent (Telegram down, 429) is sent when
// Telegram is back, unless answered meanwhile; the messages sent are kept
// in the store, so nothing is sent twice.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Defaults of Options.
const (
	DefaultPollTimeout = 25 * time.Second
	DefaultMinBackoff  = 250 * time.Millisecond
	DefaultMaxBackoff  = 30 * time.Second
	// DefaultChatInterval and DefaultGlobalInterval pace the calls as
	// Telegram asks: about one message a second in a chat, thirty a
	// second in all.
	DefaultChatInterval   = time.Second
	DefaultGlobalInterval = 34 * time.Millisecond
	callTimeout           = 30 * time.Second
	overKept              = 1024
)

// maxQueue bounds the calls waiting to be made (a var: tests lower it).
// Past it a send is not queued, or the oldest send queued makes room for
// another call; those are sent once the queue is down to half (a send is
// derived again from the approvals pending), so memory stays bounded and
// nothing is lost.
var maxQueue = 10_000

// Msg is one message sent of an approval, as the store keeps it.
type Msg struct {
	ApprovalID string
	ChatID     int64
	MessageID  int64
	Token      string
}

// Store keeps the bot's offset and messages across restarts. Load may
// block (it runs off the actor); the writes must not (done is called once
// they are committed, on any goroutine).
type Store interface {
	Load() (offset int64, msgs []Msg, err error)
	SaveOffset(next int64, done func(error))
	SaveMessage(m Msg, done func(error))
	Forget(approvalID string, done func(error))
}

// Answerer is what the bot asks and answers: the approvals manager.
type Answerer interface {
	PendingApprovals() []api.Approval
	Get(id string) (api.Approval, bool, error)
	Answer(id string, d api.Decision, res api.Resolution, reply func(api.Approval, error))
	SpawnChild(p actors.Props, done func(actors.Ref, error))
}

var _ Answerer = (*approvals.Manager)(nil)

// Options configure the bot.
type Options struct {
	Config    approvals.TelegramConfig
	Token     string // the bot's token (from secrets.toml)
	Approvals Answerer
	Store     Store // nil: memory only
	Bus       *eventlog.Bus
	System    *actors.System
	Logger    zerolog.Logger
	// HTTP is the client the calls are made with; nil: one of its own.
	HTTP        *http.Client
	PollTimeout time.Duration // getUpdates' long poll; 0: DefaultPollTimeout
	MinBackoff  time.Duration // 0: DefaultMinBackoff
	MaxBackoff  time.Duration // 0: DefaultMaxBackoff
	// ChatInterval is the least time between two calls about one chat,
	// GlobalInterval between any two calls; 0: the defaults.
	ChatInterval   time.Duration
	GlobalInterval time.Duration
}

// Bot is the handle the daemon tells approvals' comings and goings to.
// Safe from any goroutine; it never blocks.
type Bot struct {
	opts Options
	cl   *client

	mu     sync.Mutex
	ref    actors.Ref
	queued []any
}

// Start spawns the bot under the approvals supervisor.
func Start(opts Options) (*Bot, error) {
	if opts.Token == "" {
		return nil, errors.New("starting the Telegram bot: no token")
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = DefaultPollTimeout
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.ChatInterval <= 0 {
		opts.ChatInterval = DefaultChatInterval
	}
	if opts.GlobalInterval <= 0 {
		opts.GlobalInterval = DefaultGlobalInterval
	}
	hc := opts.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	b := &Bot{opts: opts, cl: &client{base: opts.Config.APIBase(), token: opts.Token, hc: hc}}
	opts.Approvals.SpawnChild(actors.Props{Kind: "telegram", ID: "bot", OnPanic: actors.Restart, MaxRestarts: 5,
		Within: time.Minute, New: func() actors.Actor { return &botActor{b: b} }},
		func(r actors.Ref, err error) {
			if err != nil {
				opts.Logger.Error().Err(err).Msg("starting the Telegram bot")
				return
			}
			b.mu.Lock()
			b.ref = r
			q := b.queued
			b.queued = nil
			b.mu.Unlock()
			for _, m := range q {
				opts.System.Send(r, m)
			}
		})
	return b, nil
}

func (b *Bot) send(m any) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.ref.IsZero() {
		if len(b.queued) < maxQueue {
			b.queued = append(b.queued, m)
		}
		b.mu.Unlock()
		return
	}
	r := b.ref
	b.mu.Unlock()
	b.opts.System.Send(r, m)
}

// Pending tells the bot of a new pending approval.
func (b *Bot) Pending(a api.Approval) { b.send(pendingMsg{a}) }

// Ended tells the bot an approval ended (its final record).
func (b *Bot) Ended(a api.Approval) { b.send(endedMsg{a}) }

// Resync has the bot send every pending approval it has not sent (after
// the approvals a previous daemon left are recovered).
func (b *Bot) Resync() { b.send(resyncMsg{}) }

// Messages of the bot's actor.
type (
	pendingMsg struct{ a api.Approval }
	endedMsg   struct{ a api.Approval }
	resyncMsg  struct{}
	loadedMsg  struct {
		offset int64
		msgs   []Msg
		finals map[string]api.Approval // approvals of msgs that are over
		err    error
	}
	pollMsg   struct{}
	polledMsg struct {
		updates []Update
		err     error
	}
	offsetSavedMsg struct{ next int64 }
	kickMsg        struct{}
	pacedMsg       struct{}
	refillMsg      struct{}
	callDoneMsg    struct {
		op    *op
		msgID int64
		err   error
	}
	answeredMsg struct {
		cbID   string
		chat   int64
		user   int64
		action string
		id     string
		a      api.Approval
		err    error
	}
)

// item is an approval the bot sends or sent.
type item struct {
	a       api.Approval
	token   string
	msgs    map[int64]int64 // chat -> message id
	ended   *api.Approval
	edits   int // edits queued or running
	sending int // sends running
}

// op is one Bot API call waiting its turn.
type op struct {
	kind     string // send, edit, answer, ask, note
	id       string // approval (not note, answer)
	chat     int64
	cbID     string // answer: the callback query
	text     string // answer, ask, note
	attempts int
}

// awaiting is a Reply or Iterate tapped in a chat: the text is the
// message that replies to its prompt (promptID, once sent), or the
// chat's next message from who tapped when no other prompt is open there.
type awaiting struct {
	id       string
	user     int64
	promptID int64
}

type botActor struct {
	b      *Bot
	ctx    context.Context
	cancel context.CancelFunc
	self   actors.Ref
	sys    *actors.System

	loaded bool
	early  []any

	offset    int64
	next      int64 // the offset once the batch in hand is recorded
	inFlight  int   // answers of the batch not yet recorded
	polling   bool
	pollFails int

	items   map[string]*item
	byToken map[string]string
	// over is what the last approvals forgotten ended as, by token, so a
	// late tap is told (bounded: overKept).
	over      map[string]api.Approval
	overOrder []string
	await     map[int64][]awaiting // by chat, oldest first
	// earlyReplies are replies to a message the bot has not heard the id of yet
	// (a prompt whose send's answer is still on its way), by chat: taken
	// again once the prompt's id is known (at most maxEarly a chat).
	earlyReplies map[int64][]*Message
	// blocked are the chats that refused the bot (403: blocked, kicked):
	// nothing is sent there until the chat writes again.
	blocked map[int64]bool

	queue []*op
	// overflowed: sends were left out of the full queue; they are
	// queued again from the approvals pending once it is down to half.
	overflowed bool
	busy       bool
	waiting    bool // a backoff or retry_after runs
	pacing     bool // a timer waits for the next call's turn
	// lastCall and lastChat are when the last call, and the last call
	// about each chat, started (pacing).
	lastCall time.Time
	lastChat map[int64]time.Time
}

// own is a message the actor sent itself (a call's result, a timer): an
// incarnation takes only its own, not those of the one a panic replaced.
type own struct {
	by  *botActor
	msg any
}

// tell sends msg to the actor, from any goroutine.
func (a *botActor) tell(msg any) { a.sys.Send(a.self, own{a, msg}) }

func (a *botActor) Receive(c *actors.Context) {
	m := c.Message()
	if o, ok := m.(own); ok {
		if o.by != a {
			return
		}
		m = o.msg
	}
	switch msg := m.(type) {
	case actors.Started:
		a.start(c)
	case actors.Stopping, actors.Restarting, actors.Stopped:
		if a.cancel != nil {
			a.cancel()
		}
	case loadedMsg:
		a.loadedFrom(c, msg)
	case pendingMsg, endedMsg, resyncMsg:
		if !a.loaded {
			a.early = append(a.early, msg)
			return
		}
		a.handle(msg)
	case pollMsg:
		a.poll()
	case polledMsg:
		a.polled(msg)
	case offsetSavedMsg:
		a.offset = msg.next
		a.poll()
	case kickMsg:
		a.waiting = false
		a.kick()
	case pacedMsg:
		a.pacing = false
		a.kick()
	case refillMsg:
		a.refill()
	case callDoneMsg:
		a.callDone(msg)
	case answeredMsg:
		a.answered(msg)
	}
}

func (a *botActor) start(c *actors.Context) {
	a.self, a.sys = c.Self(), c.System()
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.items, a.byToken, a.await = map[string]*item{}, map[string]string{}, map[int64][]awaiting{}
	a.blocked, a.lastChat = map[int64]bool{}, map[int64]time.Time{}
	a.over = map[string]api.Approval{}
	c.SetState("loading")
	st, ans, self, sys := a.b.opts.Store, a.b.opts.Approvals, a.self, a.sys
	go func() {
		var l loadedMsg
		if st != nil {
			l.offset, l.msgs, l.err = st.Load()
		}
		l.finals = map[string]api.Approval{}
		for _, m := range l.msgs {
			if _, done := l.finals[m.ApprovalID]; done {
				continue
			}
			ap, ok, err := ans.Get(m.ApprovalID)
			if err == nil && ok && ap.State.Terminal() {
				l.finals[m.ApprovalID] = ap
			} else if err == nil && !ok {
				l.finals[m.ApprovalID] = api.Approval{ID: m.ApprovalID, State: api.ApprovalCancelled}
			}
		}
		sys.Send(self, own{a, l})
	}()
}

func (a *botActor) emit(e eventlog.Event) {
	if a.b.opts.Bus != nil {
		a.b.opts.Bus.Emit(e)
	}
}

func (a *botActor) loadedFrom(c *actors.Context, l loadedMsg) {
	if l.err != nil {
		// The bot goes on from memory: the offset Telegram holds and no
		// messages (they may be sent again).
		a.b.opts.Logger.Error().Err(l.err).Msg("reading the Telegram bot's state: going on without it")
	}
	a.offset, a.loaded = l.offset, true
	for _, m := range l.msgs {
		it := a.items[m.ApprovalID]
		if it == nil {
			it = &item{a: api.Approval{ID: m.ApprovalID}, token: m.Token, msgs: map[int64]int64{}}
			a.items[m.ApprovalID] = it
			a.byToken[m.Token] = m.ApprovalID
		}
		it.msgs[m.ChatID] = m.MessageID
	}
	for id, f := range l.finals {
		if it := a.items[id]; it != nil {
			it.a = f
			a.end(f)
		}
	}
	c.SetState("running")
	a.resync()
	for _, m := range a.early {
		a.handle(m)
	}
	a.early = nil
	a.poll()
}

func (a *botActor) handle(m any) {
	switch m := m.(type) {
	case pendingMsg:
		a.pending(m.a)
	case endedMsg:
		a.end(m.a)
	case resyncMsg:
		a.resync()
	}
}

// resync sends every pending approval to the chats it has not reached.
func (a *botActor) resync() {
	for _, ap := range a.b.opts.Approvals.PendingApprovals() {
		a.pending(ap)
	}
}

func newToken() string { return api.RandomHex(tokenLen / 2) }

func (a *botActor) pending(ap api.Approval) {
	if ap.State != api.ApprovalPending {
		return
	}
	it := a.items[ap.ID]
	if it == nil {
		it = &item{token: newToken(), msgs: map[int64]int64{}}
		a.items[ap.ID] = it
		a.byToken[it.token] = ap.ID
	}
	if it.ended != nil {
		return
	}
	it.a = ap
	for _, chat := range a.b.opts.Config.AllowedChatIDs {
		if _, sent := it.msgs[chat]; sent || a.blocked[chat] || a.queuedSend(ap.ID, chat) {
			continue
		}
		a.enqueue(&op{kind: "send", id: ap.ID, chat: chat})
	}
	a.kick()
}

func (a *botActor) queuedSend(id string, chat int64) bool {
	return slices.ContainsFunc(a.queue, func(o *op) bool { return o.kind == "send" && o.id == id && o.chat == chat })
}

func (a *botActor) enqueue(o *op) {
	if len(a.queue) >= maxQueue {
		if !a.overflowed {
			a.overflowed = true
			a.emit(TelegramFailed{Method: methods[o.kind], ApprovalID: o.id, ChatID: o.chat, GaveUp: true, Reason: ReasonQueueFull,
				Error: fmt.Sprintf("%d calls wait: sends are queued again once half are made", maxQueue)})
		}
		if o.kind == "send" {
			return
		}
		i := slices.IndexFunc(a.queue, func(q *op) bool { return q.kind == "send" })
		if i < 0 {
			i = 0 // no send to make room: the oldest call goes
			a.emit(TelegramFailed{Method: methods[a.queue[0].kind], ApprovalID: a.queue[0].id, ChatID: a.queue[0].chat,
				GaveUp: true, Reason: ReasonQueueFull, Error: "the queue is full: dropped"})
		}
		drop := a.queue[i]
		a.queue = slices.Delete(a.queue, i, i+1)
		a.dropped(drop, a.items[drop.id])
	}
	a.queue = append(a.queue, o)
}

// refill queues again the sends left out of a full queue, once it is
// down to half.
func (a *botActor) refill() {
	if a.overflowed && len(a.queue) <= maxQueue/2 {
		a.overflowed = false
		a.resync()
	}
}

// end edits every chat's message of ap, over, to say how it ended.
func (a *botActor) end(ap api.Approval) {
	for chat := range a.await {
		a.closePrompt(chat, ap.ID)
	}
	it := a.items[ap.ID]
	if it == nil || it.ended != nil {
		return
	}
	// Its sends and prompts waiting their turn are dropped now, so a
	// long queue does not hold what was answered meanwhile.
	a.queue = slices.DeleteFunc(a.queue, func(o *op) bool { return o.id == ap.ID && (o.kind == "send" || o.kind == "ask") })
	if ap.Kind == "" { // forgotten by approvals: say what the bot knows
		ap.Kind = it.a.Kind
	}
	it.ended = &ap
	if it.a.Kind == "" {
		it.a = ap
	}
	for chat := range it.msgs {
		it.edits++
		a.enqueue(&op{kind: "edit", id: ap.ID, chat: chat})
	}
	a.forgetIfDone(ap.ID, it)
	a.kick()
}

// forgetIfDone forgets an ended approval once its edits are made.
func (a *botActor) forgetIfDone(id string, it *item) {
	if it.ended == nil || it.edits > 0 || it.sending > 0 || a.sendsQueued(id) {
		return
	}
	delete(a.items, id)
	delete(a.byToken, it.token)
	if a.over[it.token].ID == "" {
		a.overOrder = append(a.overOrder, it.token)
	}
	a.over[it.token] = *it.ended
	for len(a.overOrder) > overKept {
		delete(a.over, a.overOrder[0])
		a.overOrder = a.overOrder[1:]
	}
	if st := a.b.opts.Store; st != nil && len(it.msgs) > 0 {
		st.Forget(id, func(err error) {
			if err != nil {
				a.b.opts.Logger.Warn().Err(err).Str("approval", id).Msg("forgetting an approval's Telegram messages")
			}
		})
	}
}

func (a *botActor) sendsQueued(id string) bool {
	for _, o := range a.queue {
		if o.kind == "send" && o.id == id {
			return true
		}
	}
	return false
}
