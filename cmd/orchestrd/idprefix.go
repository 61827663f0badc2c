package main

// The one way the CLI reads an id someone typed: the whole id, or a unique
// start of it (`loop show 17959265`, `job 3f2a`, `approve a-89`). The kind's
// letter may be left out: `3f2a` is the start of j-3f2a1b-17.

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/wire"
)

// idKind is one kind of id the CLI takes: how to get one whole id and how
// to list the ids a prefix is looked for among.
type idKind struct {
	noun   string // "job", in "no job's id starts with"
	letter string // the ids' kind prefix ("j-"), which a prefix may leave out
	get    string // the method that takes a whole id as {"id": ...}
	list   func(c *client.Client) ([]string, error)
}

// idMatchesShown is how many ids an ambiguous prefix's error lists.
const idMatchesShown = 5

var (
	jobIDs = idKind{noun: "job", letter: "j-", get: "job.get", list: func(c *client.Client) ([]string, error) {
		// Every job, newest first, a page at a time.
		var ids []string
		f := api.Filter{Limit: api.MaxListLimit}
		for {
			var res struct {
				Jobs       []api.JobRecord `json:"jobs"`
				NextCursor string          `json:"next_cursor"`
			}
			if err := call(c, "job.list", f, &res); err != nil {
				return nil, err
			}
			for _, j := range res.Jobs {
				ids = append(ids, j.ID)
			}
			if res.NextCursor == "" {
				return ids, nil
			}
			f.Cursor = res.NextCursor
		}
	}}
	approvalIDs = idKind{noun: "approval", letter: "a-", get: "approval.get", list: func(c *client.Client) ([]string, error) {
		// The pending ones, then the newest of the history.
		var ids []string
		for _, p := range []map[string]any{{}, {"state": "all", "limit": 10000}} {
			var res struct {
				Approvals []api.Approval `json:"approvals"`
			}
			if err := call(c, "approval.list", p, &res); err != nil {
				return nil, err
			}
			for _, a := range res.Approvals {
				ids = append(ids, a.ID)
			}
		}
		return ids, nil
	}}
	taskIDs = idKind{noun: "task", letter: "t-", get: "task.get", list: func(c *client.Client) ([]string, error) {
		tasks, err := listTasks(c)
		ids := make([]string, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		return ids, err
	}}
	sessionIDs = idKind{noun: "session", letter: "s-", get: "session.get", list: func(c *client.Client) ([]string, error) {
		tasks, err := listTasks(c)
		ids := make([]string, 0, len(tasks))
		for _, t := range tasks {
			if t.SessionID != "" {
				ids = append(ids, t.SessionID)
			}
		}
		return ids, err
	}}
	loopIDs = idKind{noun: "loop", get: "loop.get", list: func(c *client.Client) ([]string, error) {
		loops, _, err := listLoops(c, api.LoopListParams{})
		ids := make([]string, len(loops))
		for i, l := range loops {
			ids[i] = l.ID
		}
		return ids, err
	}}
)

func listTasks(c *client.Client) ([]api.TaskRecord, error) {
	var res struct {
		Tasks []api.TaskRecord `json:"tasks"`
	}
	err := call(c, "task.list", map[string]any{}, &res)
	return res.Tasks, err
}

// resolveID is the one id of kinds that arg is or starts: arg itself when
// a kind knows it whole, else the id that is arg but its kind's letter,
// else the one id that starts with arg (or, the kind's letter left out,
// whose rest does). None or several is an error saying so, naming a few.
func resolveID(c *client.Client, arg string, kinds ...idKind) (string, error) {
	if arg == "" {
		return "", errors.New("the id is empty")
	}
	for _, k := range kinds {
		err := call(c, k.get, map[string]any{"id": arg}, nil)
		if err == nil {
			return arg, nil
		}
		if !isNotFound(err) {
			return "", err
		}
	}
	seen := map[string]bool{}
	var matches []string
	exact := ""
	for _, k := range kinds {
		ids, err := k.list(c)
		if err != nil {
			return "", err
		}
		for _, id := range ids {
			if !seen[id] && idHasPrefix(id, arg, k.letter) {
				seen[id] = true
				matches = append(matches, id)
				if k.letter != "" && id == k.letter+arg {
					exact = id // the whole id but its letter: j-3f2a1b-1, not -10
				}
			}
		}
	}
	if exact != "" {
		return exact, nil
	}
	nouns := make([]string, len(kinds))
	for i, k := range kinds {
		nouns[i] = k.noun
	}
	noun := strings.Join(nouns, " or ")
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return "", fmt.Errorf("no %s has an id that starts with %q", noun, arg)
	}
	sort.Strings(matches)
	shown := matches
	if len(shown) > idMatchesShown {
		shown = shown[:idMatchesShown]
	}
	more := ""
	if n := len(matches) - len(shown); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return "", fmt.Errorf("%q starts %s: %s%s; give more of it", arg,
		api.Count(len(matches), noun+" id"), strings.Join(shown, ", "), more)
}

// idHasPrefix reports whether id starts with p, or, its kind's letter
// left out, its rest does.
func idHasPrefix(id, p, letter string) bool {
	if strings.HasPrefix(id, p) {
		return true
	}
	rest, ok := strings.CutPrefix(id, letter)
	return letter != "" && ok && strings.HasPrefix(rest, p)
}

func isNotFound(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == api.CodeNotFound
}

// resolveArg is resolveID for a command: the whole id, or false after the
// error was printed.
func resolveArg(c *client.Client, stderr interface{ Write([]byte) (int, error) }, arg string, kinds ...idKind) (string, bool) {
	id, err := resolveID(c, arg, kinds...)
	if err != nil {
		callErr(stderr, err)
		return "", false
	}
	return id, true
}
