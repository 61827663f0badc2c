package clanker

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/spool"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Clanker's own timings (its src/constants.ts).
const (
	slavePromptStale = 30 * time.Second // a task prompted this long ago is prompted again
	judgePromptStale = 60 * time.Second // likewise a judge's
)

// Names under a repo's .clanker directory (the spool's are package
// spool's).
const (
	eventsName = "events.log"
	stateName  = "state.json"
)

// The most orchestrd reads of a file of .clanker.
const (
	maxTaskFile      = 16 << 20
	maxStateFile     = 1 << 20
	maxHeartbeatFile = 64 << 10
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

func stampOf(i beneath.Info) fileStamp { return fileStamp{size: i.Size, mtime: i.Mtime, ino: i.Ino} }

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
	Drain     *spool.Pos  `json:"drain,omitempty"`
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
	// seen: the hellos its socket answered, for the actor to apply.
	seen    *seenPods
	takenAt time.Time // when the spool was taken (for spool.Writing)
	// drainPending: a drain's change is committing. The next drain waits
	// for it: its end removes the taken file, which must not be the next
	// one taken meanwhile.
	drainPending bool
	started      bool
	imported     int
	// refused: the refusals said (clanker.file_refused), path -> reason,
	// each once until it changes (another reason, or the path served).
	refused map[string]string
	// openErr: the error opening .clanker said last (once until it
	// changes).
	openErr string
	// tally: what publishTally published last.
	tally RepoTally
}

func (r *repo) now() time.Time { return r.m.now() }

func (r *repo) emit(ev eventlog.Event) {
	if r.m.bus != nil {
		r.m.bus.Emit(ev)
	}
}

func (r *repo) Receive(c *actors.Context) {
	r.takeSeen()
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
		r.m.repoStarted(r.name, r.sock)
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
		return
	case actors.Restarting, actors.Stopping:
		r.stop(errors.New("the repo's actor is restarting"))
		return
	case actors.Stopped:
		if r.started {
			r.emit(RepoStopped{Repo: r.name})
		}
		r.m.setTally(r.name, nil)
		return
	}
	if r.started {
		r.publishTally()
	}
}

// publishTally publishes the repo's tasks by status and its pause for the
// daemon's metrics (Manager.Tallies), when they changed since it last did.
func (r *repo) publishTally() {
	tasks := make(map[string]int, len(taskStatuses))
	for _, t := range r.tasks {
		tasks[t.rec.str("status")]++
	}
	paused := r.st.Paused != nil
	if r.tally.Tasks != nil && paused == r.tally.Paused && maps.Equal(tasks, r.tally.Tasks) {
		return
	}
	r.tally = RepoTally{Tasks: tasks, Paused: paused}
	r.m.setTally(r.name, &r.tally)
}

// stop answers what waits (their changes may or may not be committed:
// the pods hear an error and try again or spool), then closes the socket
// without waiting for its connections: they end on their own goroutine
// (Closer), which the Manager's Shutdown waits for. Receive never blocks.
func (r *repo) stop(why error) {
	for ch := range r.waiting {
		ch.answer(nil, why)
	}
	r.waiting = nil
	if r.sock != nil {
		drained, err := r.sock.Close()
		if err != nil {
			r.m.log.Warn().Err(err).Str("repo", r.name).Msg("clanker: closing a repo's socket")
		}
		r.m.draining(drained)
		r.sock = nil
	}
}

// start loads the repo from the store, takes in what clanker wrote while
// orchestrd was away, writes out what the store has and the files do not,
// and opens the socket. A repo whose root or .clanker is not a directory
// the daemon's uid owns is not served (see clanker).
func (r *repo) start(c *actors.Context) error {
	r.tasks, r.pods, r.dirty, r.waiting = map[string]*task{}, map[string]*pod{}, map[string]bool{}, map[*change]bool{}
	r.seen = &seenPods{}
	r.refused = map[string]string{}
	r.drainPending = false
	base, judge, err := r.cfg.prompts()
	if err != nil {
		return err
	}
	r.base, r.judge = base, judge
	d, err := r.clanker()
	if err != nil {
		return r.notServed(err)
	}
	defer d.Close()
	if sub, err := d.MkdirAll("tasks", dirPerm); err == nil {
		sub.Close()
	} else if !r.refusal(err) {
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
	r.outbox = recoverOutbox(d, r.dir, snap.Outbox)
	r.seedPods(d)
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
	r.writeOut(d)
	r.rescan(c, d, true)
	sockDir, err := r.socketDir()
	if err != nil {
		return r.notServed(err)
	}
	sock, err := r.m.listen(r.cfg.Socket, sockDir, r.name, repoHandler{r.m, c.Self(), r.seen})
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
// file ends with. Replacements are written again (the same content). d is
// the repo's .clanker, at dir: the outbox names its files by path.
func recoverOutbox(d *beneath.Dir, dir string, out []state.ClankerLine) []state.ClankerLine {
	byFile := map[string][][]byte{}
	for _, l := range out {
		if !l.Replace {
			byFile[l.File] = append(byFile[l.File], []byte(l.Data))
		}
	}
	skip := map[string]int{}
	for f, entries := range byFile {
		if rel, ok := relTo(dir, f); ok {
			skip[f] = appended(d, rel, entries)
		}
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
func (r *repo) seedPods(d *beneath.Dir) {
	hd, err := d.Dir("heartbeat")
	if err != nil {
		r.refusal(err)
		return
	}
	defer hd.Close()
	ents, err := hd.ReadDir(".")
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := hd.ReadFile(e.Name(), maxHeartbeatFile)
		if err != nil {
			r.refusal(within("heartbeat", err))
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
	if d, err := r.clanker(); err != nil {
		r.openFailed(err)
	} else {
		r.writeOut(d)
		d.Close()
	}
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

// writeOut writes the committed state out to the repo's .clanker, d: the
// task files changed, then the outbox. What fails stays to be tried again
// on the next tick.
func (r *repo) writeOut(d *beneath.Dir) {
	projected := map[string]string{}
	var ws []*fileWrite
	var ids []string
	for id := range r.dirty {
		t := r.tasks[id]
		if t == nil {
			delete(r.dirty, id)
			continue
		}
		ws = append(ws, &fileWrite{rel: taskRel(id), data: t.rec.file()})
		ids = append(ids, id)
	}
	writeAll(d, ws, filePerm, r.m.opts.Sync)
	for i, w := range ws {
		id, t := ids[i], r.tasks[ids[i]]
		if w.err != nil {
			r.fileFailed(w.rel, w.err)
			continue
		}
		r.served(w.rel)
		delete(r.dirty, id)
		if info, err := d.Lstat(w.rel); err == nil {
			t.stamp = stampOf(info)
		}
		h := hashOf(w.data)
		if h != t.projected {
			t.projected = h
			projected[id] = h
		}
	}
	done, written := r.flushOutbox(d)
	if len(projected) > 0 || done > 0 || len(written) > 0 {
		// The markers: no answer waits on them (a lost one is found again
		// at start, by comparing the files with the store).
		_ = r.m.store.Commit(state.ClankerCommit{Repo: r.name, Projected: projected, OutboxDone: done, OutboxWritten: written}, func(error) {})
	}
}

// flushOutbox writes the outbox out, each file's lines in order; appends
// to one file in a row are one write. A file that fails (refused: a link,
// a FIFO, a hard link, another uid's; or an I/O error) keeps its lines,
// in order, for the next tick, and the other files go on. It returns the
// seq up to which every line is written (0: none) and the seqs written
// past it.
func (r *repo) flushOutbox(d *beneath.Dir) (done int64, written []int64) {
	var kept []state.ClankerLine
	failed := map[string]bool{}
	out := r.outbox
	for i := 0; i < len(out); {
		l := out[i]
		n := 1
		for !l.Replace && i+n < len(out) && !out[i+n].Replace && out[i+n].File == l.File {
			n++
		}
		run := out[i : i+n]
		i += n
		if failed[l.File] {
			kept = append(kept, run...)
			continue
		}
		rel, ok := relTo(r.dir, l.File)
		var err error
		switch {
		case !ok:
			err = &beneath.RefusedError{Path: l.File, Reason: "is not in the repo's .clanker"}
		case l.Replace:
			err = writeFile(d, rel, []byte(l.Data), permOf(rel), r.m.opts.Sync)
		default:
			data := []byte(l.Data)
			for _, m := range run[1:] {
				data = append(data, m.Data...)
			}
			err = appendLines(d, rel, data, permOf(rel), r.m.opts.Sync)
		}
		if err != nil {
			r.fileFailed(rel, err)
			failed[l.File] = true
			kept = append(kept, run...)
			continue
		}
		r.served(rel)
		for _, m := range run {
			if len(kept) == 0 {
				done = m.Seq
			} else {
				written = append(written, m.Seq)
			}
		}
	}
	r.outbox = kept
	return done, written
}

func (r *repo) writeFailed(path string, err error) {
	r.m.log.Warn().Err(err).Str("repo", r.name).Str("path", path).Msg("clanker: writing a repo file; trying again on the next tick")
	r.emit(WriteFailed{Repo: r.name, Path: path, Error: err.Error()})
}

// taskRel is a task's file, in .clanker.
func taskRel(id string) string { return "tasks/" + id + ".json" }

// relTo is path relative to dir, when it is beneath it.
func relTo(dir, path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, dir+"/")
	return rel, ok && rel != ""
}

// ---- the repo's files ----

// clanker opens the repo's .clanker (made if missing) for one operation:
// the repo's root is the operator's (its path is trusted, links and all),
// .clanker and everything in it are the agents' to write too, so it is
// opened anew each time (an agent may have renamed it away or put a link
// there since) and what is beneath it is reached through it only. The
// root and .clanker must be directories the daemon's uid owns: a root
// daemon serving another user's repo would act there with its own rights.
// A refusal names its path absolute.
func (r *repo) clanker() (*beneath.Dir, error) {
	root, err := beneath.OpenRoot(r.cfg.Path, beneath.Options{Owners: []int{r.m.uid}})
	if err != nil {
		var re *beneath.RefusedError
		if errors.As(err, &re) {
			return nil, &beneath.RefusedError{Path: r.cfg.Path, Reason: re.Reason}
		}
		return nil, err
	}
	defer root.Close()
	d, err := root.MkdirAll(".clanker", dirPerm)
	if err != nil {
		var re *beneath.RefusedError
		if errors.As(err, &re) {
			return nil, &beneath.RefusedError{Path: filepath.Join(r.cfg.Path, re.Path), Reason: re.Reason}
		}
		return nil, err
	}
	r.openErr = ""
	return d, nil
}

// socketDir opens the directory of the repo's socket, made if missing,
// when the socket is in the repo (by default .clanker/ipc.sock): the
// socket is bound through that descriptor, never through a path an agent
// could have linked elsewhere. A socket the config puts outside the repo
// is the operator's path: nil.
func (r *repo) socketDir() (*beneath.Dir, error) {
	rel, err := filepath.Rel(r.cfg.Path, filepath.Dir(r.cfg.Socket))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, nil
	}
	root, err := beneath.OpenRoot(r.cfg.Path, beneath.Options{Owners: []int{r.m.uid}})
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return root, nil
	}
	defer root.Close()
	d, err := root.MkdirAll(rel, dirPerm)
	var re *beneath.RefusedError
	if errors.As(err, &re) {
		return nil, &beneath.RefusedError{Path: filepath.Join(r.cfg.Path, re.Path), Reason: re.Reason}
	}
	return d, err
}

// notServed is the error of a start that could not open the repo's
// .clanker or its socket's directory.
func (r *repo) notServed(err error) error {
	var re *beneath.RefusedError
	if errors.As(err, &re) {
		return fmt.Errorf("refusing to serve it: %s %s (orchestrd serves a repo whose root and .clanker are real directories its own uid, %d, owns)",
			re.Path, re.Reason, r.m.uid)
	}
	return fmt.Errorf("opening %s: %w", r.dir, err)
}

// refusal says a refusal of a file of .clanker (its path relative to
// .clanker, or absolute) once: clanker.file_refused and a warning, once
// per path and reason until it changes (another reason, or the path
// served again), so a repo that meets it every tick does not say it
// every tick. It returns whether err was a refusal.
func (r *repo) refusal(err error) bool {
	var re *beneath.RefusedError
	if !errors.As(err, &re) {
		return false
	}
	p := re.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.dir, p)
	}
	if r.refused[p] == re.Reason {
		return true
	}
	r.refused[p] = re.Reason
	r.m.log.Warn().Str("repo", r.name).Str("path", p).Str("reason", re.Reason).
		Msg("clanker: refused a file of the repo (not read, not written: see clanker.file_refused)")
	r.emit(FileRefused{Repo: r.name, Path: p, Reason: re.Reason})
	return true
}

// fileFailed reports err, met reading or writing rel (in .clanker): a
// refusal once, another error as write_failed.
func (r *repo) fileFailed(rel string, err error) {
	if !r.refusal(err) {
		r.writeFailed(filepath.Join(r.dir, rel), err)
	}
}

// openFailed reports that the repo's .clanker could not be opened: a
// refusal, or another error, each once until it changes (every tick meets
// it).
func (r *repo) openFailed(err error) {
	if r.refusal(err) || r.openErr == err.Error() {
		return
	}
	r.openErr = err.Error()
	r.writeFailed(r.dir, err)
}

// served: rel (in .clanker) was read or written: a refusal of it, or of a
// directory on its way, is over, and is said again if it comes back.
func (r *repo) served(rel string) {
	if len(r.refused) == 0 {
		return
	}
	p := filepath.Join(r.dir, rel)
	for k := range r.refused {
		if k == p || strings.HasPrefix(p, k+"/") {
			delete(r.refused, k)
		}
	}
}

// ---- the tick ----

// tick is the repo's periodic work. The next tick is set when this one is
// done, so a slow tick (a big directory, a slow disk) delays the next
// rather than queueing ticks behind it.
func (r *repo) tick(c *actors.Context) {
	defer c.After(r.cfg.Tick.Duration, tick{})
	d, err := r.clanker()
	if err != nil {
		r.openFailed(err)
	} else {
		defer d.Close()
		if len(r.dirty) > 0 || len(r.outbox) > 0 {
			r.writeOut(d)
		}
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
	if d != nil {
		r.rescan(c, d, false)
		r.drain(c, d)
	}
}

// rescan takes in the task files clanker wrote itself (its filesystem
// fallback while the socket was down): a file that is not what orchestrd
// last wrote is the newer truth, if it is a valid task; a file gone is a
// task archived. At start it also writes out the files the store has and
// the directory lacks or has older. d is the repo's .clanker. A file
// refused (a link, a FIFO, a hard link, another uid's) is not read; one
// of a task the store has is written again in its place.
func (r *repo) rescan(c *actors.Context, d *beneath.Dir, starting bool) {
	td, err := d.Dir("tasks")
	if err != nil {
		r.refusal(err)
		return
	}
	defer td.Close()
	ents, err := td.ReadDir(".")
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
		info, err := td.Lstat(name)
		if err != nil {
			continue
		}
		st := stampOf(info)
		t := r.tasks[id]
		if t != nil && (t.stamp == st && !starting || r.inflight(id)) {
			continue // unchanged, or a change of ours is on its way to it
		}
		b, err := td.ReadFile(name, maxTaskFile)
		if err != nil {
			if r.refusal(within("tasks", err)) && t != nil {
				r.dirty[id] = true
			}
			continue
		}
		r.served(taskRel(id))
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
		r.writeOut(d)
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
	s := r.readStateFile()
	if s == nil {
		s = newRecord()
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

// readStateFile reads .clanker/state.json (nil: none, or not an object).
// A refused one is not read (said once): the daemon's next write of it
// replaces it with a file of its own.
func (r *repo) readStateFile() *record {
	d, err := r.clanker()
	if err != nil {
		r.openFailed(err)
		return nil
	}
	defer d.Close()
	b, err := d.ReadFile(stateName, maxStateFile)
	if err != nil {
		r.refusal(err)
		return nil
	}
	s, err := parseRecord(b)
	if err != nil {
		return nil
	}
	return s
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
	// Refused are the files of .clanker refused (clanker.file_refused)
	// and not served since.
	Refused []FileRefusal `json:"refused,omitempty"`
	// OutboxPending counts the lines committed and not yet written to
	// their files (waiting for a refused one, or for the next write).
	OutboxPending int `json:"outbox_pending,omitempty"`
}

// FileRefusal is a file of a repo refused, and why.
type FileRefusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
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
	if d, err := r.clanker(); err == nil {
		s.Spool.PendingBytes, s.Spool.DrainingBytes, s.Spool.DeadBytes = spool.Sizes(d, r.st.Drain)
		d.Close()
	}
	for p, why := range r.refused {
		s.Refused = append(s.Refused, FileRefusal{Path: p, Reason: why})
	}
	slices.SortFunc(s.Refused, func(a, b FileRefusal) int { return strings.Compare(a.Path, b.Path) })
	s.OutboxPending = len(r.outbox)
	return s
}

// repoHandler hands a repo's requests to its actor.
type repoHandler struct {
	m    *Manager
	ref  actors.Ref
	seen *seenPods // hellos answered here, for the actor to apply
}

func (h repoHandler) Handle(typ string, payload []byte, reply func([]byte, error)) {
	if typ == "hello" && h.hello(payload) {
		reply(okData, nil)
		return
	}
	h.m.sys.Send(h.ref, request{typ: typ, payload: payload, reply: reply})
}
