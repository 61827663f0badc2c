package executors

import (
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc/usage"
)

// One task actor per task, under its pool, from task.execute to its end:
// it owns the task's record and state (queued, running, the end), its
// timeout and the stages of stopping it (stop_task, cancel_task, the kill),
// a stop or a timeout's state over whatever the executor says, and the end:
// recorded, announced, its waiters answered. The executor actor that runs
// it owns the protocol; the pool owns the queue.

type taskActor struct {
	ps  *poolShared
	rec api.TaskRecord
	// resume is its session's sdk_session_id as the store had it when
	// the task was queued (Manager.resumeOf has a newer one).
	resume string
	exec   actors.Ref // the executor running it; zero while queued
	// override: the state the task ends in whatever the executor says
	// (timeout, stopped, the daemon's shutdown).
	override *api.TaskState
	overErr  *api.TaskError
	timers   []func()
	ended    bool
	// What the executor's tree uses while the task runs (usage.go).
	usageT      *usage.Tracker
	usagePid    int
	sampling    bool
	sampleTimer func()
	lastPending bool // the last sample follows the one under way
	// final: the task has ended and waits (finalSampleWait at most) for
	// its last sample before it is recorded; finished: it was.
	final    *taskEnd
	finished bool
}

// taskEnd is how a task ended, kept while its last sample is taken.
type taskEnd struct {
	state  api.TaskState
	err    *api.TaskError
	theirs bool
	count  int64
}

// Messages of a task actor.
type (
	// assign: run on this executor (from the pool).
	assign struct {
		exec     actors.Ref
		instance string
		pid      int
	}
	stopReq struct {
		force bool
		call  api.Call
	}
	stageTimer struct{ stage int }
	// execDone: how the executor ended the task (answered, lost, or
	// ended as asked by finishNow), with its message count.
	execDone struct {
		taskID string
		state  api.TaskState
		err    *api.TaskError
		theirs bool // err holds what the executor wrote
		usage  *api.TokenUsage
		sdk    string
		denied int
		count  int64
	}
	// cancelReq: end as state (the daemon stops, the pool crash-loops).
	cancelReq struct {
		state api.TaskState
		err   *api.TaskError
	}
)

func (t *taskActor) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case assign:
		t.assigned(c, msg)
	case stopReq:
		t.stop(c, msg)
	case stageTimer:
		t.stageTimer(c, msg)
	case execDone:
		if msg.taskID != t.rec.ID || t.ended {
			// Ended already (it waits for its last sample): a later
			// execDone must not overwrite what the first one recorded.
			return
		}
		state, err, theirs := msg.state, msg.err, msg.theirs
		if t.override != nil {
			state, err, theirs = *t.override, t.overErr, false
		}
		t.rec.TokenUsage, t.rec.Denied = msg.usage, msg.denied
		if msg.sdk != "" {
			t.rec.SDKSessionID = msg.sdk
		}
		t.end(c, state, err, theirs, msg.count)
	case cancelReq:
		t.cancel(c, msg.state, msg.err)
	case sampleTask:
		t.sampleTask(c)
	case taskSampled:
		t.taskSampled(c, msg)
	case finalSampleDue:
		t.finish(c)
	case actors.Stopping:
		if t.ended {
			return
		}
		// A task still here ends now: the pool stops with the daemon, or
		// this actor failed (a panic), and then its executor, in an
		// unknown state for it, is killed.
		t.ps.m.mu.Lock()
		stopping := t.ps.m.stopping
		t.ps.m.mu.Unlock()
		if stopping {
			t.end(c, api.TaskCancelled, &api.TaskError{Code: api.TaskErrDaemonShutdown, Message: "the daemon stopped"}, false, t.rec.MessageCount)
			return
		}
		if !t.exec.IsZero() {
			c.Send(t.exec, finishNow{taskID: t.rec.ID, state: api.TaskFailed, kill: "task " + t.rec.ID + ": its actor failed"})
		}
		t.end(c, api.TaskFailed, &api.TaskError{Code: api.TaskErrActorFailed,
			Message: "the daemon's actor of this task failed (see the actor.panicked event); its executor was killed"}, false, t.rec.MessageCount)
	}
}

func (t *taskActor) assigned(c *actors.Context, m assign) {
	if t.ended || !t.exec.IsZero() {
		// Ended while the pool gave it out: the executor is free again.
		c.Send(t.ps.pool, assignRefused{instance: m.instance})
		return
	}
	now := time.Now().UTC()
	t.exec = m.exec
	t.rec.State, t.rec.StartedAt, t.rec.Instance = api.TaskRunning, &now, m.instance
	t.startUsage(c, m.pid)
	t.ps.m.update(t.rec)
	t.record("started")
	t.ps.m.bus.Emit(TaskStarted{TaskID: t.rec.ID, SessionID: t.rec.SessionID, Executor: t.ps.h.name, Instance: m.instance, Pid: m.pid})
	c.Send(m.exec, runTask{rec: t.rec, token: api.RandomHex(32), task: c.Self(), resume: t.ps.m.resumeOf(t.rec.SessionID, t.resume)})
	t.timers = append(t.timers, c.After(time.Duration(t.rec.TimeoutMs)*time.Millisecond, stageTimer{stage: 1}))
}

func (t *taskActor) stop(c *actors.Context, m stopReq) {
	if t.ended {
		m.call.Fail(api.Errorf(api.CodeInvalidState, "task %s is not queued or running", t.rec.ID))
		return
	}
	if t.exec.IsZero() { // queued
		t.end(c, api.TaskCancelled, &api.TaskError{Code: api.TaskErrStopped, Message: "stopped while queued"}, false, 0)
		m.call.Respond(map[string]any{"task": t.rec})
		return
	}
	st := api.TaskCancelled
	t.override, t.overErr = &st, &api.TaskError{Code: api.TaskErrStopped, Message: "stopped by task.stop"}
	// Answered when the task ends.
	call := m.call
	t.ps.m.wait(t.rec.ID, func(rec api.TaskRecord) { call.Respond(map[string]any{"task": rec}) })
	if m.force {
		t.stage(c, 3, "user_cancelled")
		return
	}
	t.stage(c, 1, "user_cancelled")
}

func (t *taskActor) stageTimer(c *actors.Context, m stageTimer) {
	if t.ended || t.exec.IsZero() {
		return
	}
	if m.stage == 1 && t.override == nil {
		st := api.TaskTimeout
		t.override, t.overErr = &st, &api.TaskError{Code: api.TaskErrTimeout,
			Message: fmt.Sprintf("no result within timeout_ms %d", t.rec.TimeoutMs)}
	}
	reason := "timeout"
	if t.overErr != nil && t.overErr.Code == api.TaskErrStopped {
		reason = "user_cancelled"
	}
	t.stage(c, m.stage, reason)
}

// stage runs one step of ending the task its executor runs: 1 stop_task,
// 2 cancel_task, 3 the executor's group killed.
func (t *taskActor) stage(c *actors.Context, stage int, reason string) {
	grace := t.ps.cfg.StopGrace.Duration
	switch stage {
	case 1, 2:
		c.Send(t.exec, stageMsg{taskID: t.rec.ID, stage: stage, reason: reason})
		t.timers = append(t.timers, c.After(grace, stageTimer{stage: stage + 1}))
	default:
		c.Send(t.exec, finishNow{taskID: t.rec.ID, state: *t.override, err: t.overErr, kill: "task " + t.rec.ID + ": " + reason})
	}
}

// cancel ends the task as state: at once when queued, through its
// executor when running (which answers with execDone).
func (t *taskActor) cancel(c *actors.Context, state api.TaskState, err *api.TaskError) {
	if t.ended {
		return
	}
	if t.exec.IsZero() {
		t.end(c, state, err, false, 0)
		return
	}
	t.override, t.overErr = &state, err
	c.Send(t.exec, finishNow{taskID: t.rec.ID, state: state, err: err})
}

// end finishes the task: recorded, announced, its waiters answered; the
// pool hears it and stops the actor.
// theirs: err holds what the executor wrote.
func (t *taskActor) end(c *actors.Context, state api.TaskState, err *api.TaskError, theirs bool, count int64) {
	if t.ended {
		return
	}
	t.ended = true
	for _, cancel := range t.timers {
		cancel()
	}
	t.timers = nil
	now := time.Now().UTC()
	t.rec.State, t.rec.Error, t.rec.FinishedAt = state, err, &now
	t.rec.MessageCount = count
	t.final = &taskEnd{state: state, err: err, theirs: theirs, count: count}
	if t.finalSample(c) {
		return // finish follows its last sample, or finalSampleWait
	}
	t.finish(c)
}

// finish records and announces the ended task, once; its waiters are
// answered, the pool hears it and stops the actor.
func (t *taskActor) finish(c *actors.Context) {
	if t.finished || t.final == nil {
		return
	}
	t.finished = true
	t.stopUsage()
	state, err, theirs, count := t.final.state, t.final.err, t.final.theirs, t.final.count
	m := t.ps.m
	// The agent session first: whoever hears task.finished (a chat, a
	// loop) may start the session's next task at once, and it must
	// resume this one, not begin anew.
	if t.rec.SDKSessionID != "" {
		m.sdkEnded(t.rec.SessionID, t.rec.SDKSessionID)
	}
	m.bus.Emit(TaskFinished{TaskID: t.rec.ID, SessionID: t.rec.SessionID, Executor: t.ps.h.name, State: state,
		Error: err, MessageCount: count, TokenUsage: t.rec.TokenUsage, Denied: t.rec.Denied, Usage: t.rec.Usage, theirs: theirs})
	// Its waiters hear of the end once it is committed (record's done).
	m.ending(t.rec)
	t.record("finished")
	// The pool stops this actor: its Terminated then always follows the
	// pool's taskDone, and one that comes first means a failed actor.
	c.Send(t.ps.pool, taskDone{id: t.rec.ID})
}

// record queues the task's record; a refused or failed write is logged
// (the task goes on in memory; after a crash the store's version wins).
func (t *taskActor) record(what string) {
	m, rec := t.ps.m, t.rec
	done := func(err error) {
		if err != nil {
			m.opts.Logger.Error().Err(err).Str("task", rec.ID).Msg("recording the task " + what)
		}
		if what == "finished" {
			m.finished(rec)
			m.forget(rec.ID)
			m.sdkCommitted()
		}
	}
	var err error
	switch what {
	case "started":
		err = m.log.TaskStarted(rec, done)
	default:
		err = m.log.TaskFinished(rec, done)
	}
	if err != nil {
		done(err)
	}
}
