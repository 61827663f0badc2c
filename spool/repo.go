package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Clanker's own timings (its src/constants.ts).
const (
	slavePromptStale = 30 * time.Second // a task prompted this long ago is prompted again
	judgePromptStale = 60 * time.Second // likewise a judge's
	spoolBatch       = 200              // spool lines applied per tick
	// writersGrace bounds the wait for the writers that had the spool open
	// when it was taken (an append is one open-write-close): past it the
	// drain reads what is there.
	writersGrace = 10 * time.Second
)

// Names under a repo's .clanker directory.
const (
	spoolName    = "ipc-spool.ndjson"
	drainingName = "ipc-spool.draining.ndjson"
	deadName     = "ipc-spool.dead.ndjson"
	eventsName   = "events.log"
	stateName    = "state.json"
)

// task is one task of a repo.
type task struct {
	id        string
	seq       int64
	rec       *record
	projected string    // hash of the file orchestrd last wrote for it
	created   string    // hash of the task_create that made it
	stamp     fileStamp // the file as last written or read by orchestrd
}

// fileStamp tells a task file changed since orchestrd last saw it.
type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

func stampOf(fi fs.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// pod is a pod the repo heard from.
type pod struct {
	id, role, worktree string
	pid                int
	lastSeen           time.Time
	stale              bool
}

// repoState is the repo's own state, stored as JSON with its tasks.
type repoState struct {
	// Added is the config of a repo added at run time (serve-repo): the
	// daemon serves it again when it restarts.
	Added     *RepoConfig `json:"added,omitempty"`
	Paused    *pauseState `json:"paused,omitempty"`
	Drain     *drainPos   `json:"drain,omitempty"`
	NextSeq   int64       `json:"next_seq"`
	OutboxSeq int64       `json:"outbox_seq"`
}

type pauseState struct {
	Pod        string    `json:"pod"`
	Role       string    `json:"role"`
	Message    string    `json:"message"`
	At         time.Time `json:"at"`
	Until      time.Time `json:"until"`
	AutoPaused bool      `json:"auto_paused"`
}

// drainPos is how far the drain of the taken spool file got: the offset
// after the last line whose effects are committed.
type drainPos struct {
	Ino    uint64 `json:"ino"`
	Offset int64  `json:"offset"`
}

// Messages of a repo's actor.
type (
	request struct {
		typ     string
		payload []byte
		reply   func([]byte, error)
	}
	committed struct {
		ch  *change
		err error
	}
	tick      struct{}
	resumeReq struct{ reply func(bool, error) }
	statusReq struct{ reply func(RepoStatus) }
)

// repo is the actor that owns one repo's state.
type repo struct {
	m     *Manager
	cfg   RepoConfig
	name  string // the repo's path: its name in events and the store
	dir   string // its .clanker directory
	base  string
	judge string

	tasks map[string]*task
	pods  map[string]*pod
	st    repoState

	// outbox: committed entries not yet written out, in order.
	outbox []state.ClankerLine
	// dirty: tasks whose file is not yet written as committed.
	dirty map[string]bool
	// waiting: changes committed to the store but not yet answered.
	waiting map[*change]bool
	sock    Closer
	takenAt time.Time // when the spool was taken (for writersGrace)
	// drainPending: a drain's change is committing. The next drain waits
	// for it: its end removes the taken file, which must not be the next
	// one taken meanwhile.
	drainPending bool
	started      bool
	imported     int
}

func (r *repo) now() time.Time { return r.m.now() }

func (r *repo) emit(ev eventlog.Event) {
	if r.m.bus != nil {
		r.m.bus.Emit(ev)
	}
}

func (r *repo) Receive(c *actors.Context) {
	switch m := c.Message().(type) {
	case actors.Started:
		if err := r.start(c); err != nil {
			r.m.repoFailed(r.name, err)
			r.emit(RepoFailed{Repo: r.name, Error: err.Error()})
			r.m.log.Error().Err(err).Str("repo", r.name).Msg("clanker: a repo could not start")
			c.StopSelf()
			return
		}
		r.started = true
		r.m.repoStarted(r.name)
		r.tick(c)
	case request:
		r.request(c, m)
	case committed:
		r.committed(c, m)
	case tick:
		r.tick(c)
	case resumeReq:
		m.reply(r.resume(c, "command"), nil)
	case statusReq:
		m.reply(r.status())
	case actors.Restarting, actors.Stopping:
		r.stop(errors.New("the repo's actor is restarting"))
	case actors.Stopped:
		if r.started {
			r.emit(RepoStopped{Repo: r.name})
		}
	}
}

// stop closes the socket and answers what waits (their changes may or may
// not be committed: the pods hear an error and try again or spool).
func (r *repo) stop(why error) {
	if r.sock != nil {
		if err := r.sock.Close(); err != nil {
			r.m.log.Warn().Err(err).Str("repo", r.name).Msg("clanker: closing a repo's socket")
		}
		r.sock = nil
	}
	for ch := range r.waiting {
		ch.answer(nil, why)
	}
	r.waiting = nil
}

// start loads the repo from the store, takes in what clanker wrote while
// orchestrd was away, writes out what the store has and the files do not,
// and opens the socket.
func (r *repo) start(c *actors.Context) error {
	r.tasks, r.pods, r.dirty, r.waiting = map[string]*task{}, map[string]*pod{}, map[string]bool{}, map[*change]bool{}
	r.drainPending = false
	base, judge, err := r.cfg.prompts()
	if err != nil {
		return err
	}
	r.base, r.judge = base, judge
	if err := os.MkdirAll(filepath.Join(r.dir, "tasks"), 0o755); err != nil {
		return fmt.Errorf("making %s: %w", filepath.Join(r.dir, "tasks"), err)
	}
	snap, err := r.m.store.Load(r.name)
	if err != nil {
		return fmt.Errorf("loading the repo's state: %w", err)
	}
	if snap.State != nil {
		if err := json.Unmarshal(snap.State, &r.st); err != nil {
			return fmt.Errorf("reading the repo's stored state: %w", err)
		}
	}
	for _, t := range snap.Tasks {
		rec, err := parseRecord(t.Record)
		if err != nil {
			return fmt.Errorf("reading stored task %s: %w", t.ID, err)
		}
		r.tasks[t.ID] = &task{id: t.ID, seq: t.Seq, rec: rec, projected: t.Projected, created: t.Created}
		r.st.NextSeq = max(r.st.NextSeq, t.Seq+1)
	}
	r.outbox = recoverOutbox(snap.Outbox)
	r.seedPods()
	if r.cfg.runtime && r.st.Added == nil {
		added := r.cfg
		r.st.Added = &added
		ch := r.newChange("ipc")
		ch.saveState = true
		r.commit(c, ch)
	} else if !r.cfg.runtime && r.st.Added != nil {
		r.st.Added = nil // in the config now
		ch := r.newChange("ipc")
		ch.saveState = true
		r.commit(c, ch)
	}
	// What was committed and maybe not written out when the daemon
	// stopped: the outbox, and the files whose task changed.
	r.flushOutbox()
	r.rescan(c, true)
	sock, err := r.m.listen(r.cfg.Socket, r.name, repoHandler{r.m, c.Self()})
	if err != nil {
		return err
	}
	r.sock = sock
	r.emit(RepoStarted{Repo: r.name, Socket: r.cfg.Socket, Tasks: len(r.tasks), Imported: r.imported})
	return nil
}

// recoverOutbox drops from the stored outbox the appends already made
// (the daemon was killed after it appended them and before it recorded
// that): for each file, the longest run of its first pending appends the
// file ends with. Replacements are written again (the same content).
func recoverOutbox(out []state.ClankerLine) []state.ClankerLine {
	byFile := map[string][][]byte{}
	for _, l := range out {
		if !l.Replace {
			byFile[l.File] = append(byFile[l.File], []byte(l.Data))
		}
	}
	skip := map[string]int{}
	for f, entries := range byFile {
		skip[f] = appended(f, entries)
	}
	kept := out[:0:0]
	for _, l := range out {
		if !l.Replace && skip[l.File] > 0 {
			skip[l.File]--
			continue
		}
		kept = append(kept, l)
	}
	return kept
}

// seedPods reads the heartbeat files, so a pod that beat before the
// daemon started is known (and said stale if it stays silent).
func (r *repo) seedPods() {
	dir := filepath.Join(r.dir, "heartbeat")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var hb struct {
			SlaveID string `json:"slaveId"`
			TS      string `json:"ts"`
			Pid     int    `json:"pid"`
			Role    string `json:"role"`
		}
		if json.Unmarshal(b, &hb) != nil || hb.SlaveID == "" {
			continue
		}
		seen, err := time.Parse(time.RFC3339Nano, hb.TS)
		if err != nil {
			continue
		}
		r.pods[hb.SlaveID] = &pod{id: hb.SlaveID, role: hb.Role, pid: hb.Pid, lastSeen: seen}
	}
}

// ---- requests ----

// request runs one pod request through its handler and commits what it
// changed before it is answered.
func (r *repo) request(c *actors.Context, m request) {
	ch := r.newChange("ipc")
	ch.reply = m.reply
	data, err := r.handle(ch, m.typ, m.payload)
	if err != nil {
		r.emit(RequestRefused{Repo: r.name, Type: knownType(m.typ), Error: logText(err), Via: "ipc"})
		m.reply(nil, err)
		return
	}
	ch.data = data
	r.commit(c, ch)
}

// handle runs typ's handler. A handler checks before it changes anything:
// an error means nothing changed.
func (r *repo) handle(ch *change, typ string, payload []byte) ([]byte, error) {
	h, ok := handlers[typ]
	if !ok {
		return nil, refuse("unknown ipc type", "unknown ipc type: %s", typ)
	}
	var p map[string]json.RawMessage
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, fmt.Errorf("%s: payload must be a JSON object", typ)
		}
	}
	if p == nil {
		p = map[string]json.RawMessage{}
	}
	return h(r, ch, p)
}

// ---- commits ----

// change is what one request (or one tick's spool batch) changed: it is
// committed to the store as one transaction, then written out, then
// answered.
type change struct {
	via       string
	tasks     map[string]bool
	deleted   []string
	created   map[string]string
	outbox    []state.ClankerLine
	events    []eventlog.Event
	saveState bool
	reply     func([]byte, error)
	data      []byte
	after     func() // after the commit is written out (the drain's file removal)
}

func (r *repo) newChange(via string) *change {
	return &change{via: via, tasks: map[string]bool{}, created: map[string]string{}}
}

func (ch *change) empty() bool {
	return len(ch.tasks) == 0 && len(ch.deleted) == 0 && len(ch.outbox) == 0 && !ch.saveState
}

func (ch *change) answer(data []byte, err error) {
	if ch.reply != nil {
		ch.reply(data, err)
		ch.reply = nil
	}
}

// touch marks a task changed.
func (ch *change) touch(id string) { ch.tasks[id] = true }

// logEvent appends a line to events.log, as clanker's appendEvent writes
// it: {ts, type, msg, slaveId?, taskId?, data?}.
func (r *repo) logEvent(ch *change, typ, msg, slaveID, taskID string, data map[string]any) {
	line := jsonObject("ts", isoNow(r.now()), "type", typ, "msg", msg, "slaveId", optional(slaveID),
		"taskId", optional(taskID), "data", optionalMap(data))
	r.addOutbox(ch, filepath.Join(r.dir, eventsName), false, string(line)+"\n")
}

func (r *repo) addOutbox(ch *change, file string, replace bool, data string) {
	r.st.OutboxSeq++
	ch.outbox = append(ch.outbox, state.ClankerLine{Seq: r.st.OutboxSeq, File: file, Replace: replace, Data: data})
	ch.saveState = true
}

// commit records ch in the store; committed writes it out and answers.
func (r *repo) commit(c *actors.Context, ch *change) {
	if ch.empty() {
		r.finish(ch)
		return
	}
	cc := state.ClankerCommit{Repo: r.name, Deleted: ch.deleted, Outbox: ch.outbox}
	for id := range ch.tasks {
		t := r.tasks[id]
		if t == nil {
			continue
		}
		cc.Tasks = append(cc.Tasks, state.ClankerTask{ID: id, Seq: t.seq, Record: t.rec.compact(), Created: ch.created[id]})
	}
	slices.SortFunc(cc.Tasks, func(a, b state.ClankerTask) int { return int(a.Seq - b.Seq) })
	if ch.saveState {
		cc.State, _ = json.Marshal(r.st)
	}
	sys, self := c.System(), c.Self()
	r.waiting[ch] = true
	if err := r.m.store.Commit(cc, func(err error) { sys.Send(self, committed{ch: ch, err: err}) }); err != nil {
		delete(r.waiting, ch)
		r.failed(c, ch, err)
	}
}

func (r *repo) committed(c *actors.Context, m committed) {
	if !r.waiting[m.ch] {
		return // answered when a restart began
	}
	delete(r.waiting, m.ch)
	if m.err != nil {
		r.failed(c, m.ch, m.err)
		return
	}
	for id := range m.ch.tasks {
		r.dirty[id] = true
	}
	r.outbox = append(r.outbox, m.ch.outbox...)
	r.writeOut()
	r.finish(m.ch)
}

// finish emits a change's events and answers it.
func (r *repo) finish(ch *change) {
	if ch.after != nil {
		ch.after()
	}
	for _, ev := range ch.events {
		r.emit(ev)
	}
	ch.answer(ch.data, nil)
}

// failed: the store refused a change. The repo's memory may be ahead of
// the store now: the actor restarts and reloads (its supervisor does).
func (r *repo) failed(c *actors.Context, ch *change, err error) {
	err = fmt.Errorf("recording the change: %w", err)
	r.m.log.Error().Err(err).Str("repo", r.name).Msg("clanker: the state store refused a change; reloading the repo")
	ch.answer(nil, err)
	panic(fmt.Sprintf("clanker repo %s: %v", r.name, err))
}

// writeOut writes the committed state out: the task files changed, then
// the outbox. What fails stays to be tried again on the next tick.
func (r *repo) writeOut() {
	projected := map[string]string{}
	var ws []*fileWrite
	var ids []string
	for id := range r.dirty {
		t := r.tasks[id]
		if t == nil {
			delete(r.dirty, id)
			continue
		}
		ws = append(ws, &fileWrite{path: r.taskPath(id), data: t.rec.file()})
		ids = append(ids, id)
	}
	writeAll(ws, 0o644, r.m.opts.Sync)
	for i, w := range ws {
		id, t := ids[i], r.tasks[ids[i]]
		if w.err != nil {
			r.writeFailed(w.path, w.err)
			continue
		}
		delete(r.dirty, id)
		if fi, err := os.Stat(w.path); err == nil {
			t.stamp = stampOf(fi)
		}
		h := hashOf(w.data)
		if h != t.projected {
			t.projected = h
			projected[id] = h
		}
	}
	done := r.flushOutbox()
	if len(projected) > 0 || done > 0 {
		// The markers: no answer waits on them (a lost one is found again
		// at start, by comparing the file with the store).
		_ = r.m.store.Commit(state.ClankerCommit{Repo: r.name, Projected: projected, OutboxDone: done}, func(error) {})
	}
}

// flushOutbox writes the outbox out in order, stopping at the first
// failure; it returns the seq of the last entry written (0: none). Appends
// to one file in a row are one write.
func (r *repo) flushOutbox() int64 {
	var done int64
	for len(r.outbox) > 0 {
		l := r.outbox[0]
		n := 1
		var err error
		if l.Replace {
			err = writeAtomic(l.File, []byte(l.Data), 0o644, r.m.opts.Sync)
		} else {
			data := []byte(l.Data)
			for n < len(r.outbox) && !r.outbox[n].Replace && r.outbox[n].File == l.File {
				data = append(data, r.outbox[n].Data...)
				n++
			}
			err = appendLines(l.File, data, r.m.opts.Sync)
		}
		if err != nil {
			r.writeFailed(l.File, err)
			break
		}
		done = r.outbox[n-1].Seq
		r.outbox = r.outbox[n:]
	}
	return done
}

func (r *repo) writeFailed(path string, err error) {
	r.m.log.Warn().Err(err).Str("repo", r.name).Str("path", path).Msg("clanker: writing a repo file; trying again on the next tick")
	r.emit(WriteFailed{Repo: r.name, Path: path, Error: err.Error()})
}

func (r *repo) taskPath(id string) string { return filepath.Join(r.dir, "tasks", id+".json") }

// ---- the tick ----

// tick is the repo's periodic work. The next tick is set when this one is
// done, so a slow tick (a big directory, a slow disk) delays the next
// rather than queueing ticks behind it.
func (r *repo) tick(c *actors.Context) {
	defer c.After(r.cfg.Tick.Duration, tick{})
	if len(r.dirty) > 0 || len(r.outbox) > 0 {
		r.writeOut()
	}
	now := r.now()
	for _, p := range r.pods {
		if !p.stale && now.Sub(p.lastSeen) > r.cfg.StaleAfter.Duration {
			p.stale = true
			r.emit(PodStale{Repo: r.name, Pod: p.id, Role: p.role, Pid: p.pid, LastSeenMs: now.Sub(p.lastSeen).Milliseconds()})
		}
	}
	if p := r.st.Paused; p != nil && !now.Before(p.Until) {
		r.resume(c, "timeout")
	}
	r.rescan(c, false)
	r.drain(c)
}

// rescan takes in the task files clanker wrote itself (its filesystem
// fallback while the socket was down): a file that is not what orchestrd
// last wrote is the newer truth, if it is a valid task; a file gone is a
// task archived. At start it also writes out the files the store has and
// the directory lacks or has older.
func (r *repo) rescan(c *actors.Context, starting bool) {
	dir := filepath.Join(r.dir, "tasks")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	ch := r.newChange("file")
	onDisk := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		id := strings.TrimSuffix(name, ".json")
		onDisk[id] = true
		fi, err := e.Info()
		if err != nil {
			continue
		}
		st := stampOf(fi)
		t := r.tasks[id]
		if t != nil && (t.stamp == st && !starting || r.inflight(id)) {
			continue // unchanged, or a change of ours is on its way to it
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		h := hashOf(b)
		if t != nil {
			t.stamp = st
			if h == hashOf(t.rec.file()) {
				if t.projected != h {
					r.dirty[id] = true // only the marker is missing
				}
				continue
			}
			if h == t.projected && starting {
				r.dirty[id] = true // an older write of ours: the store is newer
				continue
			}
			if r.dirty[id] {
				continue // ours is not written yet; it wins
			}
		}
		rec, err := parseRecord(b)
		if err == nil {
			err = validTask(rec)
		}
		if err == nil && rec.str("id") != id {
			err = refuse("its id is not its file's name", "its id %q is not its file's name", rec.str("id"))
		}
		if err != nil {
			if t != nil && starting {
				// Torn by a power loss, or written badly: the store has it.
				r.dirty[id] = true
				continue
			}
			r.m.log.Debug().Str("error", logText(err)).Str("repo", r.name).Str("file", name).Msg("clanker: a task file is not a valid task; left as it is")
			if t != nil {
				t.stamp = st
			}
			continue
		}
		if t == nil {
			t = &task{id: id, seq: r.st.NextSeq}
			r.st.NextSeq++
			ch.saveState = true
			r.tasks[id] = t
		}
		t.rec, t.stamp, t.projected = rec, st, h
		ch.touch(id)
		r.imported++
		ch.events = append(ch.events, TaskImported{Repo: r.name, TaskID: id, Status: rec.str("status")})
	}
	for id, t := range r.tasks {
		if onDisk[id] || r.inflight(id) {
			continue
		}
		if t.projected == "" || r.dirty[id] {
			r.dirty[id] = true // never written (or not yet): write it
			continue
		}
		delete(r.tasks, id)
		ch.deleted = append(ch.deleted, id)
		ch.events = append(ch.events, TaskImported{Repo: r.name, TaskID: id, Removed: true})
	}
	if starting {
		r.writeOut()
	}
	r.commit(c, ch)
}

// inflight: a change to task id is on its way to the store (its file
// will be written once it is committed, and not before).
func (r *repo) inflight(id string) bool {
	for ch := range r.waiting {
		if ch.tasks[id] {
			return true
		}
	}
	return false
}

// ---- pause ----

// resume hands the fleet work again; false when it was not paused.
func (r *repo) resume(c *actors.Context, reason string) bool {
	p := r.st.Paused
	if p == nil {
		return false
	}
	r.st.Paused = nil
	ch := r.newChange("ipc")
	ch.saveState = true
	r.logEvent(ch, "USAGE_LIMIT_CLEARED", "usage limit cleared ("+reason+")", p.Pod, "", nil)
	if p.AutoPaused {
		r.logEvent(ch, "RESUMED", "resumed all work (usage limit cleared)", "", "", nil)
	}
	r.writeStateFile(ch, func(s *record) {
		if p.AutoPaused {
			s.set("paused", json.RawMessage("false"))
		}
		ul := newRecord()
		if v, ok := s.vals["usageLimit"]; ok {
			if old, err := parseRecord(v); err == nil {
				ul = old
			}
		}
		ul.set("active", json.RawMessage("false"))
		s.set("usageLimit", ul.compact())
	})
	ch.events = append(ch.events, Resumed{Repo: r.name, Reason: reason, PausedMs: r.now().Sub(p.At).Milliseconds()})
	r.commit(c, ch)
	return true
}

// writeStateFile changes .clanker/state.json as clanker's own tools read
// it, keeping what orchestrd does not know of it.
func (r *repo) writeStateFile(ch *change, edit func(*record)) {
	path := filepath.Join(r.dir, stateName)
	s := newRecord()
	if b, err := os.ReadFile(path); err == nil {
		if old, err := parseRecord(b); err == nil {
			s = old
		}
	}
	// A pending replace of the same file is the newer content.
	for i := len(r.outbox) - 1; i >= 0; i-- {
		if r.outbox[i].File == path && r.outbox[i].Replace {
			if old, err := parseRecord([]byte(r.outbox[i].Data)); err == nil {
				s = old
			}
			break
		}
	}
	edit(s)
	r.addOutbox(ch, path, true, string(s.file()))
}

// ---- status ----

// RepoStatus is one repo as clanker.repos shows it.
type RepoStatus struct {
	Path   string         `json:"path"`
	Socket string         `json:"socket"`
	Tasks  map[string]int `json:"tasks"` // by status
	Pods   []PodStatus    `json:"pods"`
	Paused *PauseStatus   `json:"paused,omitempty"`
	Spool  SpoolStatus    `json:"spool"`
}

// PodStatus is one pod of a repo.
type PodStatus struct {
	ID         string `json:"id"`
	Role       string `json:"role,omitempty"`
	Pid        int    `json:"pid,omitempty"`
	LastSeenMs int64  `json:"last_seen_ms"`
	Stale      bool   `json:"stale"`
}

// PauseStatus says why and until when a repo's fleet is paused.
type PauseStatus struct {
	Pod     string    `json:"pod"`
	Role    string    `json:"role"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
}

// SpoolStatus is the repo's spool.
type SpoolStatus struct {
	PendingBytes  int64 `json:"pending_bytes"`  // in ipc-spool.ndjson
	DrainingBytes int64 `json:"draining_bytes"` // left to read in the taken file
	DeadBytes     int64 `json:"dead_bytes"`     // in ipc-spool.dead.ndjson
}

func (r *repo) status() RepoStatus {
	s := RepoStatus{Path: r.name, Socket: r.cfg.Socket, Tasks: map[string]int{}, Pods: []PodStatus{}}
	for _, t := range r.tasks {
		s.Tasks[t.rec.str("status")]++
	}
	now := r.now()
	for _, p := range r.pods {
		s.Pods = append(s.Pods, PodStatus{ID: p.id, Role: p.role, Pid: p.pid, LastSeenMs: now.Sub(p.lastSeen).Milliseconds(), Stale: p.stale})
	}
	slices.SortFunc(s.Pods, func(a, b PodStatus) int { return strings.Compare(a.ID, b.ID) })
	if p := r.st.Paused; p != nil {
		s.Paused = &PauseStatus{Pod: p.Pod, Role: p.Role, Message: p.Message, Since: p.At, Until: p.Until}
	}
	if fi, err := os.Stat(filepath.Join(r.dir, spoolName)); err == nil {
		s.Spool.PendingBytes = fi.Size()
	}
	if fi, err := os.Stat(filepath.Join(r.dir, drainingName)); err == nil {
		s.Spool.DrainingBytes = fi.Size()
		if r.st.Drain != nil {
			s.Spool.DrainingBytes -= r.st.Drain.Offset
		}
	}
	if fi, err := os.Stat(filepath.Join(r.dir, deadName)); err == nil {
		s.Spool.DeadBytes = fi.Size()
	}
	return s
}

// repoHandler hands a repo's requests to its actor.
type repoHandler struct {
	m   *Manager
	ref actors.Ref
}

func (h repoHandler) Handle(typ string, payload []byte, reply func([]byte, error)) {
	h.m.sys.Send(h.ref, request{typ: typ, payload: payload, reply: reply})
}
