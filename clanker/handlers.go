package clanker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

// handler is one request type's handler: it checks the payload, then
// changes the repo (recording in ch what it changed) and returns the
// response's data. An error means nothing changed.
type handler func(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error)

// handlers is the table of the nine request types, as clanker's dashboard
// serves them (its src/ipc/handlers.ts), but git commit tracking and
// worktree sync.
var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"hello":         hello,
		"heartbeat":     heartbeat,
		"usage_limit":   usageLimit,
		"task_create":   taskCreate,
		"task_status":   taskStatus,
		"task_request":  taskRequest,
		"judge_request": judgeRequest,
		"task_handoff":  taskHandoff,
		"task_note":     taskNote,
	}
}

var (
	okData = []byte(`{"ok":true}`)
	noTask = []byte(`{"taskId":null}`) // no work for the pod
)

// refusal is a handler's error that quotes what the pod sent: msg is the
// pod's answer (clanker's words), log the same without what it sent, for
// the event log and the daemon's log. What a pod sends never goes into
// either: a spool's lines may be anyone's file (see drain.go).
type refusal struct{ msg, log string }

func (e *refusal) Error() string { return e.msg }

// refuse is a refusal: log, and the answer made from format and args.
func refuse(log, format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...), log: log}
}

// logText is err as the event log and the daemon's log may hold it: none
// of the sender's bytes. The handlers' other errors quote nothing of it.
func logText(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.log
	}
	return wire.ClankerLogText(err)
}

// knownType is typ if it is one of the nine types, else "" (the pod's
// own text, which the logs do not hold).
func knownType(typ string) string {
	if _, ok := handlers[typ]; ok {
		return typ
	}
	return ""
}

// requireString is clanker's requireString: a non-blank string, or
// "Missing LABEL".
func requireString(p map[string]json.RawMessage, key, label string) (string, error) {
	var s string
	v := p[key]
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil || strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("Missing %s", label)
	}
	return s, nil
}

// optString is a string member, "" when absent or not a string.
func optString(p map[string]json.RawMessage, key string) string {
	var s string
	if v := p[key]; len(v) > 0 && v[0] == '"' {
		_ = json.Unmarshal(v, &s)
	}
	return s
}

func requireRole(p map[string]json.RawMessage) (string, error) {
	role := optString(p, "role")
	if role != "slave" && role != "judge" {
		return "", errors.New("Role must be slave or judge")
	}
	return role, nil
}

// taskAndRole reads the taskId (it names files: history/task-<id>-...)
// and the role (slave or judge) of a handoff or a note.
func taskAndRole(p map[string]json.RawMessage) (id, role string, err error) {
	if id, err = requireString(p, "taskId", "taskId"); err != nil {
		return "", "", err
	}
	if err = validTaskID(id); err != nil {
		return "", "", err
	}
	role, err = requireRole(p)
	return id, role, err
}

// podName checks a pod id that names a file (heartbeat/<id>.json).
func podName(id string) error {
	if id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00") || len(id) > 200 {
		const why = " (it names the file heartbeat/<podId>.json: no slashes, at most 200 bytes)"
		return refuse("invalid podId"+why, "invalid podId %q"+why, id)
	}
	return nil
}

func (r *repo) pod(id string) *pod {
	pd := r.pods[id]
	if pd == nil {
		pd = &pod{id: id}
		r.pods[id] = pd
	}
	return pd
}

// heartbeat writes heartbeat/<podId>.json ({slaveId, ts, pid, role}, as
// clanker's writeHeartbeat) and marks the pod alive. A heartbeat is not
// in the store: the next one replaces it. A heartbeat/ refused (a link,
// another uid's) is said once and not written; the pod is alive all the
// same.
func heartbeat(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	id, err := requireString(p, "podId", "podId")
	if err != nil {
		return nil, err
	}
	if err := podName(id); err != nil {
		return nil, err
	}
	pid, ok := number(p["pid"])
	if !ok {
		if s := optString(p, "pid"); s != "" {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				pid, ok = f, true
			}
		}
	}
	if !ok || math.IsInf(pid, 0) {
		return nil, errors.New("Missing pid")
	}
	role := optString(p, "role")
	if role == "" {
		role = "slave"
	}
	ts := optString(p, "ts")
	if ts == "" {
		ts = isoNow(r.now())
	}
	hb := newRecord()
	hb.setString("slaveId", id)
	hb.setString("ts", ts)
	hb.set("pid", jsonNumber(pid))
	hb.setString("role", role)
	rel := "heartbeat/" + id + ".json"
	d, err := r.clanker()
	if err == nil {
		err = writeFile(d, rel, hb.file(), filePerm, r.m.opts.Sync)
		d.Close()
	}
	switch {
	case err == nil:
		r.served(rel)
	case !r.refusal(err):
		return nil, fmt.Errorf("writing the heartbeat: %w", err)
	}
	pd := r.pod(id)
	pd.role, pd.pid, pd.lastSeen, pd.stale = role, int(pid), r.now(), false
	return okData, nil
}

// usageLimit pauses the repo's fleet: task_request and judge_request
// answer {taskId: null} until orchestrd clanker resume or
// usage_limit_pause.
func usageLimit(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	id, err := requireString(p, "podId", "podId")
	if err != nil {
		return nil, err
	}
	role := optString(p, "role")
	if role != "planner" && role != "judge" && role != "slave" {
		role = "slave"
	}
	msg := optString(p, "message")
	if msg == "" {
		msg = "usage limit detected"
	}
	ts := optString(p, "ts")
	if strings.TrimSpace(ts) == "" {
		ts = isoNow(r.now())
	}
	if r.st.Paused != nil {
		return okData, nil
	}
	now := r.now()
	autoPaused := true
	if s := r.readStateFile(); s != nil && string(s.vals["paused"]) == "true" {
		autoPaused = false
	}
	r.st.Paused = &pauseState{Pod: id, Role: role, Message: msg, At: now, Until: now.Add(r.cfg.UsageLimitPause.Duration), AutoPaused: autoPaused}
	ch.saveState = true
	r.writeStateFile(ch, func(s *record) {
		if autoPaused {
			s.set("paused", json.RawMessage("true"))
		}
		ul := newRecord()
		ul.set("active", json.RawMessage("true"))
		ul.setString("detectedAt", ts)
		ul.setString("message", msg)
		ul.setString("podId", id)
		ul.setString("role", role)
		ul.set("autoPaused", json.RawMessage(strconv.FormatBool(autoPaused)))
		s.set("usageLimit", ul.compact())
	})
	line := jsonObject("ts", ts, "type", "USAGE_LIMIT", "msg", msg, "slaveId", id, "data", map[string]any{"role": role})
	r.addOutbox(ch, filepath.Join(r.dir, eventsName), false, string(line)+"\n")
	if autoPaused {
		r.logEvent(ch, "PAUSED", "paused all work (usage limit)", "", "", nil)
	}
	ch.events = append(ch.events, Paused{Repo: r.name, Pod: id, Role: role, Message: msg, Until: r.st.Paused.Until.UTC().Format(time.RFC3339)})
	return okData, nil
}

// taskCreate saves the task (status queued unless given), as clanker's
// writeTaskCreate; a replay of the same create changes nothing.
func taskCreate(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	raw := p["task"]
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("Missing task payload")
	}
	rec, err := parseRecord(raw)
	if err != nil {
		return nil, errors.New("Missing task payload")
	}
	if v, ok := rec.vals["status"]; !ok || string(v) == "null" {
		rec.setString("status", "queued")
	}
	if err := validTask(rec); err != nil {
		return nil, err
	}
	id := rec.str("id")
	created := hashOf(rec.compact())
	data := jsonObject("taskId", id)
	t := r.tasks[id]
	if t != nil && t.created == created {
		return data, nil // the same create again (a spool replay, a retry)
	}
	replaced := t != nil
	if t == nil {
		t = &task{id: id, seq: r.st.NextSeq}
		r.st.NextSeq++
		ch.saveState = true
		r.tasks[id] = t
	}
	t.rec, t.created = rec, created
	ch.touch(id)
	ch.created[id] = created
	r.logEvent(ch, "TASK_CREATED", "task created", "", id, nil)
	ch.events = append(ch.events, TaskCreated{Repo: r.name, TaskID: id, Status: rec.str("status"), Replaced: replaced, Via: ch.via})
	return data, nil
}

// statusEvents are the events.log types of transitionTaskStatus.
var statusEvents = map[string]string{"rework": "TASK_REWORK", "blocked": "TASK_BLOCKED", "failed": "TASK_FAILED",
	"needs_judge": "TASK_NEEDS_JUDGE", "done": "TASK_DONE"}

// taskStatus is clanker's transitionTaskStatus: rework clears promptedAt;
// blocked keeps the assigned pod as the resume pod and clears the
// assignment; failed clears the assignment, the resume pod and promptedAt.
func taskStatus(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	id, err := requireString(p, "taskId", "taskId")
	if err != nil {
		return nil, err
	}
	status := optString(p, "status")
	if status == "" {
		return nil, errors.New("Missing status")
	}
	if !taskStatuses[status] {
		return nil, refuse("Invalid task record (invalid status)", "Invalid task record: %s (invalid status %q)", id, status)
	}
	t := r.tasks[id]
	if t == nil {
		return nil, refuse("Task not found", "Task not found: %s", id)
	}
	rec := t.rec.clone()
	from := rec.str("status")
	prev := rec.str("assignedSlaveId")
	rec.setString("status", status)
	switch status {
	case "rework":
		rec.del("promptedAt")
	case "blocked":
		if rec.str("resumeSlaveId") == "" && prev != "" {
			rec.setString("resumeSlaveId", prev)
		}
		rec.del("assignedSlaveId")
		rec.del("promptedAt")
	case "failed":
		rec.del("assignedSlaveId")
		rec.del("resumeSlaveId")
		rec.del("promptedAt")
	}
	if err := validTask(rec); err != nil {
		return nil, err
	}
	t.rec = rec
	ch.touch(id)
	typ := statusEvents[status]
	if typ == "" {
		typ = "TASK_STATUS"
	}
	r.logEvent(ch, typ, "status → "+status, prev, id, usageData(rec))
	ch.events = append(ch.events, TaskStatus{Repo: r.name, TaskID: id, From: from, Status: status, Pod: prev, Via: ch.via})
	return jsonObject("taskId", id, "status", status), nil
}

// usageData is the data of a status line: the task's usage, if any.
func usageData(rec *record) map[string]any {
	v, ok := rec.vals["usage"]
	if !ok {
		return nil
	}
	var u map[string]json.RawMessage
	if json.Unmarshal(v, &u) != nil {
		return nil
	}
	d := map[string]any{}
	for _, k := range [][2]string{{"tok", "tokens"}, {"cost", "cost"}, {"judgeCost", "judgeCost"}} {
		if x, ok := u[k[1]]; ok {
			d[k[0]] = x
		}
	}
	return d
}

// busy are the statuses that keep a pod busy with its task (clanker's
// assign.ts).
var busy = map[string]bool{"running": true, "needs_judge": true, "rework": true, "blocked": true, "paused": true}

// taskRequest hands the pod its task: the one it already has (running or
// rework), else the oldest queued task if the pod is not busy with
// another. The prompt is the base prompt and the task's; a task prompted
// less than 30 s ago is answered without it.
func taskRequest(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	podID, err := requireString(p, "podId", "podId")
	if err != nil {
		return nil, err
	}
	if r.st.Paused != nil {
		return noTask, nil
	}
	ordered := r.ordered()
	var target *task
	for _, t := range ordered {
		if st := t.rec.str("status"); t.rec.str("assignedSlaveId") == podID && (st == "running" || st == "rework") {
			target = t
			break
		}
	}
	rec := (*record)(nil)
	if target == nil {
		for _, t := range ordered {
			if t.rec.str("assignedSlaveId") == podID && busy[t.rec.str("status")] {
				return noTask, nil // busy with another
			}
		}
		for _, t := range ordered {
			if t.rec.str("status") == "queued" {
				target = t
				break
			}
		}
		if target == nil {
			return noTask, nil
		}
		rec = target.rec.clone()
		rec.setString("status", "running")
		rec.setString("assignedSlaveId", podID)
		rec.del("resumeSlaveId")
	} else {
		rec = target.rec.clone()
	}
	if rec.str("prompt") == "" {
		return noTask, nil
	}
	now := r.now()
	if !stale(rec.str("promptedAt"), now, slavePromptStale) {
		if rec != target.rec {
			target.rec = rec
			ch.touch(target.id)
		}
		return jsonObject("taskId", target.id, "status", rec.str("status")), nil
	}
	resent := rec.str("promptedAt") != ""
	rec.setString("assignedSlaveId", podID)
	if rec.str("status") == "queued" {
		rec.setString("status", "running")
	}
	at := isoNow(now)
	rec.setString("promptedAt", at)
	target.rec = rec
	ch.touch(target.id)
	msg := "task prompt requested via ipc"
	if resent {
		msg = "task prompt re-sent via ipc"
	}
	r.logEventAt(ch, at, "TASK_PROMPTED", msg, podID, target.id)
	ch.events = append(ch.events, TaskPrompted{Repo: r.name, TaskID: target.id, Pod: podID, Role: "slave", Status: rec.str("status"), Resent: resent})
	return jsonObject("taskId", target.id, "prompt", joinPrompt(r.base, rec.str("prompt")), "status", rec.str("status")), nil
}

// judgeRequest hands a judge the first (by id) needs_judge task not handed
// to a judge in the last 60 s (judgePromptedAt; unparseable is old).
func judgeRequest(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	podID, err := requireString(p, "podId", "podId")
	if err != nil {
		return nil, err
	}
	if r.st.Paused != nil {
		return noTask, nil
	}
	now := r.now()
	var target *task
	for _, t := range r.tasks {
		if t.rec.str("status") != "needs_judge" || !stale(t.rec.str("judgePromptedAt"), now, judgePromptStale) {
			continue
		}
		if target == nil || t.id < target.id {
			target = t
		}
	}
	if target == nil {
		return noTask, nil
	}
	rec := target.rec.clone()
	at := isoNow(now)
	rec.setString("judgePromptedAt", at)
	target.rec = rec
	ch.touch(target.id)
	r.logEventAt(ch, at, "TASK_PROMPTED", "judge prompt requested via ipc", podID, target.id)
	ch.events = append(ch.events, TaskPrompted{Repo: r.name, TaskID: target.id, Pod: podID, Role: "judge", Status: "needs_judge"})
	return jsonObject("taskId", target.id, "prompt", joinPrompt(r.judge, rec.str("prompt")), "status", "needs_judge"), nil
}

// taskHandoff writes history/task-<id>-<role>.md as clanker's handoff
// content, and the usage into the task's.
func taskHandoff(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	id, role, err := taskAndRole(p)
	if err != nil {
		return nil, err
	}
	t := r.tasks[id]
	diffs := optString(p, "diffs")
	if strings.TrimSpace(diffs) == "" && role == "slave" && t != nil && t.rec.str("slaveCommitSha") != "" {
		diffs = "commit: " + t.rec.str("slaveCommitSha")
	}
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	content := strings.Join([]string{"# " + role + " handoff", "", "## Summary", or(optString(p, "summary"), "(none)"), "",
		"## Tests", or(optString(p, "tests"), "(not provided)"), "", "## Diffs", or(diffs, "(not provided)"), "",
		"## Risks", or(optString(p, "risks"), "(none)"), ""}, "\n")
	r.addOutbox(ch, filepath.Join(r.dir, "history", "task-"+id+"-"+role+".md"), true, content)
	r.recordUsage(ch, t, p["usage"])
	ch.events = append(ch.events, Handoff{Repo: r.name, TaskID: id, Role: role, Via: ch.via})
	return jsonObject("taskId", id, "role", role), nil
}

// taskNote writes the note as history/task-<id>-<role>.md (clanker keeps
// one file per task and role: a note replaces the handoff before it), and
// the usage into the task's.
func taskNote(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	id, role, err := taskAndRole(p)
	if err != nil {
		return nil, err
	}
	content, err := requireString(p, "content", "content")
	if err != nil {
		return nil, err
	}
	r.addOutbox(ch, filepath.Join(r.dir, "history", "task-"+id+"-"+role+".md"), true, content)
	r.recordUsage(ch, r.tasks[id], p["usage"])
	ch.events = append(ch.events, Note{Repo: r.name, TaskID: id, Role: role, Via: ch.via})
	return jsonObject("taskId", id, "role", role), nil
}

// recordUsage is clanker's recordUsage: each usage figure given replaces
// the task's (mergeTaskUsage), and TASK_USAGE is logged.
func (r *repo) recordUsage(ch *change, t *task, raw json.RawMessage) {
	if t == nil || len(raw) == 0 || raw[0] != '{' {
		return
	}
	var in map[string]json.RawMessage
	if json.Unmarshal(raw, &in) != nil {
		return
	}
	given := false
	for _, k := range []string{"tokens", "cost", "judgeTokens", "judgeCost"} {
		if isNumber(in[k]) {
			given = true
		}
	}
	if !given {
		return
	}
	var old map[string]json.RawMessage
	_ = json.Unmarshal(t.rec.vals["usage"], &old)
	u := newRecord()
	for _, k := range []string{"tokens", "cost", "judgeTokens", "judgeCost"} {
		switch {
		case isNumber(in[k]):
			u.set(k, in[k])
		case isNumber(old[k]):
			u.set(k, old[k])
		case k == "tokens" || k == "cost":
			u.set(k, json.RawMessage("0"))
		}
	}
	rec := t.rec.clone()
	rec.set("usage", u.compact())
	t.rec = rec
	ch.touch(t.id)
	r.logEvent(ch, "TASK_USAGE", "task usage updated", rec.str("assignedSlaveId"), t.id, usageData(rec))
}

// ordered is the repo's tasks, oldest first.
func (r *repo) ordered() []*task {
	ts := make([]*task, 0, len(r.tasks))
	for _, t := range r.tasks {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *task) int {
		if a.seq != b.seq {
			return int(a.seq - b.seq)
		}
		return strings.Compare(a.id, b.id)
	})
	return ts
}

// stale: ts is absent, unparseable or older than d (clanker's
// isTimestampStale).
func stale(ts string, now time.Time, d time.Duration) bool {
	if ts == "" {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return true
	}
	return now.Sub(t) > d
}

func joinPrompt(base, prompt string) string {
	if strings.TrimSpace(base) == "" {
		return prompt
	}
	return strings.TrimRight(base, "\n") + "\n\n" + prompt
}

func (r *repo) logEventAt(ch *change, ts, typ, msg, slaveID, taskID string) {
	line := jsonObject("ts", ts, "type", typ, "msg", msg, "slaveId", optional(slaveID), "taskId", optional(taskID))
	r.addOutbox(ch, filepath.Join(r.dir, eventsName), false, string(line)+"\n")
}

// isoNow is JavaScript's toISOString: UTC, milliseconds, Z.
func isoNow(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// omit marks a member jsonObject leaves out.
type omit struct{}

func optional(s string) any {
	if s == "" {
		return omit{}
	}
	return s
}

func optionalMap(m map[string]any) any {
	if len(m) == 0 {
		return omit{}
	}
	return m
}

// jsonObject writes the members in the order given (key, value, ...), as
// JSON.stringify does for an object literal; omit{} values are left out.
func jsonObject(kv ...any) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for i := 0; i+1 < len(kv); i += 2 {
		if _, skip := kv[i+1].(omit); skip {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		b.Write(jsonString(kv[i].(string)))
		b.WriteByte(':')
		switch v := kv[i+1].(type) {
		case string:
			b.Write(jsonString(v))
		case json.RawMessage:
			b.Write(v)
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			// The usage keys in clanker's order, then any others.
			order := map[string]int{"role": 0, "tok": 1, "cost": 2, "judgeCost": 3}
			slices.SortFunc(keys, func(a, b string) int {
				oa, okA := order[a]
				ob, okB := order[b]
				switch {
				case okA && okB:
					return oa - ob
				case okA:
					return -1
				case okB:
					return 1
				}
				return strings.Compare(a, b)
			})
			args := make([]any, 0, 2*len(keys))
			for _, k := range keys {
				args = append(args, k, v[k])
			}
			b.Write(jsonObject(args...))
		default:
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(v)
			b.Truncate(b.Len() - 1)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}
