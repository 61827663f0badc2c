package render

import (
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// TaskState is a task's state with what its record adds, for a table's
// column: its error's code, when to retry (a usage limit's reset), the
// tool uses denied: "failed (usage_limit, retry after 2026-11-29 15:04, 2
// denied)".
func TaskState(t api.TaskRecord) string {
	st := OneLine(string(t.State))
	var notes []string
	if t.Error != nil {
		notes = append(notes, OneLine(t.Error.Code))
		if t.Error.RetryAt != nil {
			notes = append(notes, "retry after "+t.Error.RetryAt.Local().Format("2006-01-02 15:04"))
		}
	}
	if t.Denied > 0 {
		notes = append(notes, strconv.Itoa(t.Denied)+" denied")
	}
	if len(notes) > 0 {
		st += " (" + strings.Join(notes, ", ") + ")"
	}
	return st
}

// TaskErrorWords says a built-in agent's failures in words: the usage
// limit, a refused key. "" for the others, whose code and message say it.
func TaskErrorWords(e *api.TaskError) string {
	if e == nil {
		return ""
	}
	switch e.Code {
	case api.TaskErrUsageLimit:
		return "the agent hit its provider's rate or usage limit"
	case api.TaskErrAuthFailed:
		return "the agent's provider refused its key (see the pool's secrets)"
	}
	return ""
}

// TaskError says why a task failed, timed out or was cancelled, on one
// line: its code, its words (TaskErrorWords), its message, when to retry:
// "usage_limit: the agent hit its provider's rate or usage limit (429
// Too Many Requests); retry after 2026-11-29 15:04:05 UTC". "" for nil.
func TaskError(e *api.TaskError) string {
	if e == nil {
		return ""
	}
	s := OneLine(e.Code)
	if w := TaskErrorWords(e); w != "" {
		s += ": " + w
	}
	if m := OneLine(e.Message); m != "" {
		s += " (" + m + ")"
	}
	if e.RetryAt != nil {
		s += "; retry after " + e.RetryAt.Local().Format("2006-01-02 15:04:05 MST")
	}
	return s
}

// Took is how long a task ran: from its start to its end, or to now while
// it runs; "-" before it started.
func Took(t api.TaskRecord, now time.Time) string {
	if t.StartedAt == nil {
		return "-"
	}
	end := now
	if t.FinishedAt != nil {
		end = *t.FinishedAt
	}
	return Duration(end.Sub(*t.StartedAt))
}

// Cost is what a task's (or a session's) tokens cost: "$0.0042"; "-" when
// the agent reported no cost (none reported is not free).
func Cost(u *api.TokenUsage) string {
	if u == nil || u.CostUSD <= 0 {
		return "-"
	}
	return dollars(u.CostUSD)
}

// dollars is a cost in US dollars: "$0.0042".
func dollars(usd float64) string { return "$" + strconv.FormatFloat(usd, 'f', 4, 64) }

// Tools is the tools a task may use: "Bash, Read"; "the executor's" when
// it named none.
func Tools(ts []string) string {
	if len(ts) == 0 {
		return "the executor's"
	}
	return OneLine(strings.Join(ts, ", "))
}
