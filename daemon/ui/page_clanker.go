package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// clanker: the repos the daemon serves clanker's pods for (clanker.repos),
// each with its tasks by status, its pods and their heartbeats, its spool,
// and its pause. orchestrd never pauses a repo itself: a pod that reports
// a usage limit pauses its repo's fleet (no task or judge is handed out)
// until the repo's usage_limit_pause passes or a person resumes it
// (clanker.resume), so the page shows a pause and offers Resume only.

// clankerKinds change what the clanker page shows. Heartbeats are no
// events (a pod sends one every few seconds): a pod's last heartbeat is as
// of the page's last reload, and a new pod shows at the next; a pod gone
// quiet is clanker.pod_stale. clanker.handoff, clanker.note and
// clanker.request_refused change nothing it shows; clanker.task_prompted
// does (a queued task handed out runs). clanker.repo_failed and
// clanker.write_failed are the errors it lists (a repo that did not start
// is not among clanker.repos).
var clankerKinds = []string{"clanker.repo_started", "clanker.repo_failed", "clanker.repo_stopped", "clanker.task_created",
	"clanker.task_imported", "clanker.task_prompted", "clanker.task_status", "clanker.pod_stale", "clanker.paused",
	"clanker.resumed", "clanker.spool_drained", "clanker.line_dead_lettered", "clanker.file_refused",
	"clanker.write_failed"}

// clankerStatusOrder is clanker's order of task statuses.
var clankerStatusOrder = []string{"queued", "running", "needs_judge", "rework", "blocked", "paused", "done", "failed"}

const maxRepoPath = 4096

func init() {
	register(&page{Name: "clanker", Title: "clanker", Pattern: "/ui/clanker", Nav: true, Kinds: clankerKinds, Data: clankerData})
	registerAction(&action{Name: "clanker.resume", Method: "clanker.resume", Params: func(f url.Values) (any, error) {
		p, err := formPath(f, "path")
		if err != nil {
			return nil, err
		}
		return map[string]any{"path": p}, nil
	}})
}

// formPath is an absolute, clean path of printable UTF-8 (a repo's root).
func formPath(f url.Values, field string) (string, error) {
	v := f.Get(field)
	switch {
	case v == "":
		return "", fmt.Errorf("%s: missing (the repo's root)", field)
	case len(v) > maxRepoPath:
		return "", fmt.Errorf("%s: at most %d bytes, got %d", field, maxRepoPath, len(v))
	case !utf8.ValidString(v) || strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0:
		return "", fmt.Errorf("%s: not a printable path: %q", field, clipForm(v))
	case !filepath.IsAbs(v) || filepath.Clean(v) != v:
		return "", fmt.Errorf("%s: not an absolute, clean path: %q", field, clipForm(v))
	}
	return v, nil
}

// clankerRepo is a repo as clanker.repos answers it (clanker.RepoStatus:
// the dashboard knows the domains by their methods' JSON only; the test
// checks the two agree).
type clankerRepo struct {
	Path   string         `json:"path"`
	Socket string         `json:"socket"`
	Tasks  map[string]int `json:"tasks"`
	Pods   []clankerPod   `json:"pods"`
	Paused *clankerPause  `json:"paused,omitempty"`
	Spool  struct {
		PendingBytes  int64 `json:"pending_bytes"`
		DrainingBytes int64 `json:"draining_bytes"`
		DeadBytes     int64 `json:"dead_bytes"`
	} `json:"spool"`
	Refused []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"refused,omitempty"`
	OutboxPending int `json:"outbox_pending,omitempty"`

	// The page's own.
	Counts []clankerCount `json:"-"`
	Total  int            `json:"-"`
}

type clankerPod struct {
	ID         string `json:"id"`
	Role       string `json:"role,omitempty"`
	Pid        int    `json:"pid,omitempty"`
	LastSeenMs int64  `json:"last_seen_ms"`
	Stale      bool   `json:"stale"`
}

// LastSeen is when the pod's last heartbeat came (as of the answer).
func (p clankerPod) LastSeen(asOf time.Time) time.Time {
	return asOf.Add(-time.Duration(p.LastSeenMs) * time.Millisecond)
}

type clankerPause struct {
	Pod     string    `json:"pod"`
	Role    string    `json:"role"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
}

type clankerCount struct {
	Status string
	N      int
}

type clankerView struct {
	Repos  []clankerRepo
	AsOf   time.Time
	Paused int
	Errors []errorLine // the clanker ones of the overview's last errors, newest first
	Kept   int         // how many errors the overview keeps
}

func clankerData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var res struct {
		Repos []clankerRepo `json:"repos"`
	}
	if err := s.call(ctx, "clanker.repos", nil, &res); err != nil {
		return nil, err
	}
	v := clankerView{Repos: res.Repos, AsOf: time.Now(), Kept: recentErrorsKept}
	for i := range v.Repos {
		rp := &v.Repos[i]
		rp.Counts, rp.Total = clankerCounts(rp.Tasks)
		if rp.Paused != nil {
			v.Paused++
		}
	}
	// The overview's last errors, not a read of the log: a page that
	// reloads on every task handed out must not scan the event log.
	for _, e := range s.errs.list() {
		if strings.HasPrefix(e.Kind, "clanker.") {
			v.Errors = append(v.Errors, e)
		}
	}
	return v, nil
}

// clankerCounts are a repo's task counts in clanker's status order (a
// status it does not know after them, by name), and their sum.
func clankerCounts(m map[string]int) ([]clankerCount, int) {
	rank := map[string]int{}
	for i, st := range clankerStatusOrder {
		rank[st] = i
	}
	out := []clankerCount{}
	total := 0
	for st, n := range m {
		out = append(out, clankerCount{st, n})
		total += n
	}
	sort.Slice(out, func(i, j int) bool {
		ri, oki := rank[out[i].Status]
		rj, okj := rank[out[j].Status]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return out[i].Status < out[j].Status
	})
	return out, total
}
