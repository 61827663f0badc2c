package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/loops"
	"github.com/orchestrd/orchestrd/loops/gitwt"
	"github.com/orchestrd/orchestrd/state"
)

// The loops domain's ports, over the executors, the lanes, the approvals
// and the state store.

// loopAgents runs iterations as executor tasks.
type loopAgents struct {
	m   *executors.Manager
	log zerolog.Logger
}

var _ loops.Agents = loopAgents{}

func (a loopAgents) Execute(spec api.TaskSpec, reply func(string, error)) {
	a.m.Execute(spec, func(taskID, _ string, err error) { reply(taskID, err) })
}

func (a loopAgents) DeniedTools(tr api.TaskRecord, done func([]string)) {
	go func() {
		tools, err := a.m.DeniedTools(tr.ID, tr.SessionID)
		if err != nil {
			a.log.Warn().Err(err).Str("task_id", tr.ID).Msg("reading the tools a loop's task had denied")
		}
		done(tools)
	}()
}

func (a loopAgents) Wait(id string, done func(api.TaskRecord)) error { return a.m.Wait(id, done) }

func (a loopAgents) Stop(id string, force bool) {
	a.m.Stop(id, force, func(_ api.TaskRecord, err error) {
		if err != nil {
			a.log.Debug().Err(err).Str("task_id", id).Msg("stopping a loop's task")
		}
	})
}

// loopJobs runs validation jobs on a lane, keeping the tail of their
// output (at most loops.MaxFeedback bytes).
type loopJobs struct {
	m   *lanes.Manager
	log zerolog.Logger
}

var _ loops.Jobs = loopJobs{}

func (j loopJobs) Run(spec api.JobSpec, started func(string, error), ended func(loops.JobResult)) {
	j.m.SubmitReading(spec, "loop-validation", func(id string, r *lanes.OutputReader, err error) {
		if err != nil {
			started("", err)
			return
		}
		started(id, nil)
		go func() {
			tail := readTail(r, loops.MaxFeedback)
			rec := r.Record()
			r.Close("done")
			if !rec.State.Terminal() {
				// The reader ended before its job (closed): wait for the record.
				done := make(chan api.JobRecord, 1)
				if _, err := j.m.Wait(id, func(jr api.JobRecord) { done <- jr }); err == nil {
					rec = <-done
				}
			}
			res := loops.JobResult{JobID: id, State: rec.State, ExitCode: rec.ExitCode, Error: rec.Error, Tail: tail,
				Duration: time.Duration(rec.DurationMs) * time.Millisecond}
			if len(res.Tail) == 0 && rec.Output != "" {
				res.Tail = []byte(tailOf(rec.Output, loops.MaxFeedback))
			}
			ended(res)
		}()
	})
}

// readTail reads r to its end, keeping the last max bytes.
func readTail(r *lanes.OutputReader, max int) []byte {
	buf := make([]byte, 0, max)
	err := r.ReadToEnd(context.Background(), func(p lanes.OutputPiece) error {
		if p.Gap > 0 {
			buf = append(buf, "\n[output missed]\n"...)
		}
		buf = append(buf, p.Data...)
		if len(buf) > max {
			buf = append(buf[:0], buf[len(buf)-max:]...)
		}
		return nil
	})
	if err != nil {
		buf = append(buf, "\n[output reading stopped]"...)
	}
	if len(buf) > max {
		buf = buf[len(buf)-max:]
	}
	return buf
}

func tailOf(s string, max int) string {
	if len(s) > max {
		return s[len(s)-max:]
	}
	return s
}

func (j loopJobs) Wait(id string, done func()) (func(), error) {
	return j.m.Wait(id, func(api.JobRecord) { done() })
}

func (j loopJobs) Cancel(id string) {
	j.m.CancelWith(id, true, func(_ bool, err error) {
		if err != nil {
			j.log.Debug().Err(err).Str("job_id", id).Msg("cancelling a loop's validation job")
		}
	})
}

// loopGate asks people through the approvals domain.
type loopGate struct{ m *approvals.Manager }

var _ loops.Gate = loopGate{}

// loopApprovalTimeout is how long a loop's question stays pending: a plan
// waits for a person overnight and more.
const loopApprovalTimeout = 30 * 24 * time.Hour

func (g loopGate) Ask(loopID, kind, content string, specs []string, answer func(loops.GateAnswer)) (string, func(string), error) {
	sp, err := json.Marshal(specs)
	if err != nil {
		return "", nil, err
	}
	p, err := g.m.Ask(approvals.Request{Source: api.SourcePlan, Kind: kind, Content: content, Specs: sp,
		SessionID: loopID, LoopID: loopID, Timeout: loopApprovalTimeout}, func(a api.Approval) { answer(gateAnswer(a)) })
	if err != nil {
		return "", nil, err
	}
	return p.ID(), p.Cancel, nil
}

func (g loopGate) Await(id string, answer func(loops.GateAnswer)) error {
	_, err := g.m.Await(id, func(a api.Approval) { answer(gateAnswer(a)) })
	return err
}

// gateAnswer is an approval's end as a loop hears it.
func gateAnswer(a api.Approval) loops.GateAnswer {
	ans := loops.GateAnswer{ApprovalID: a.ID}
	switch a.State {
	case api.ApprovalAllowed, api.ApprovalAlwaysAllowed:
		ans.Approved = true
	case api.ApprovalReplied:
		ans.Iterate = true
		if a.Resolution != nil {
			ans.Feedback = a.Resolution.UserMessage
		}
	default:
		ans.Reason = string(a.State)
		if r := a.Resolution; r != nil && r.Message != "" {
			ans.Reason += ": " + r.Message
		} else if r != nil && r.Reason != "" {
			ans.Reason += ": " + r.Reason
		}
	}
	return ans
}

// loopStore is the loops' durable record in the state store.
type loopStore struct{ st *state.Store }

var _ loops.Store = loopStore{}

func (s loopStore) SaveLoop(r api.LoopRecord, done func(error)) error {
	return s.st.Enqueue(state.LoopSaved(r), done)
}

func (s loopStore) SaveIteration(it api.LoopIteration, done func(error)) error {
	return s.st.Enqueue(state.IterationSaved(it), done)
}

func (s loopStore) DeleteLoops(ids []string, done func(error)) error {
	return s.st.Enqueue(state.LoopsDeleted(ids), done)
}

func (s loopStore) Loops() ([]api.LoopRecord, error) { return s.st.Loops().All() }

func (s loopStore) Iterations(id string) ([]api.LoopIteration, error) {
	return s.st.Loops().Iterations(id)
}

// sandboxGit runs the loops' git in the agents' sandbox (gitwt.SetSandbox)
// when the daemon sandboxes them: the home and the hook's socket hidden.
func sandboxGit(on bool, home, exe string, hide []string) error {
	if !on {
		gitwt.SetSandbox("", nil)
		return nil
	}
	abs, err := filepath.Abs(home)
	if err == nil {
		home, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return fmt.Errorf("resolving the home to hide it from git: %w", err)
	}
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the orchestrd binary for git's sandbox: %w", err)
		}
	}
	gitwt.SetSandbox(exe, append([]string{home}, hide...))
	return nil
}
