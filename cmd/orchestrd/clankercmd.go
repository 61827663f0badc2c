package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orchestrd/orchestrd/clanker"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

const clankerUsage = `orchestrd clanker [--home DIR] [repos] [--json]
orchestrd clanker serve-repo [--home DIR] [--socket S] [--base-prompt-file F] [--judge-prompt-file F] PATH
orchestrd clanker resume [--home DIR] PATH

clanker's dashboard side, for the repos of [[clanker.repos]] and those added
at run time. repos (the default) lists them: their tasks by status, their
pods, a pause, their spool. serve-repo starts serving a repo now and prints
the export line for its pods (CLANKER_IPC_SOCKET). resume hands a repo's
fleet work again after a usage_limit paused it.`

// clankerCommands are the subcommands of `orchestrd clanker`.
var clankerCommands = map[string]bool{"repos": true, "serve-repo": true, "resume": true}

func cmdClanker(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("clanker")
	home := homeFlag(fs)
	socket := fs.String("socket", "", "serve-repo: the pods' socket `S` (default PATH/.clanker/ipc.sock)")
	baseFile := fs.String("base-prompt-file", "", "serve-repo: the base prompt, from `FILE`")
	judgeFile := fs.String("judge-prompt-file", "", "serve-repo: the judge prompt, from `FILE`")
	asJSON := fs.Bool("json", false, "repos: print the repos as JSON")
	pos, code, ok := parseInterspersed(fs, clankerUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	sub, rest := "repos", pos
	if len(pos) > 0 && clankerCommands[pos[0]] {
		sub, rest = pos[0], pos[1:]
	}
	switch sub {
	case "repos":
		if len(rest) > 0 {
			return usageError(fs, clankerUsage, stderr, "unknown subcommand %q (want: repos, serve-repo, resume)", rest[0])
		}
	default:
		if len(rest) != 1 {
			return usageError(fs, clankerUsage, stderr, "%s wants exactly one PATH (the repo's root)", sub)
		}
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	switch sub {
	case "serve-repo":
		path, err := filepath.Abs(rest[0])
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd clanker serve-repo: %v\n", err)
			return exitFailure
		}
		rc := clanker.RepoConfig{Path: path, Socket: *socket, BasePromptFile: abs(*baseFile), JudgePromptFile: abs(*judgeFile)}
		var res struct {
			Path   string `json:"path"`
			Socket string `json:"socket"`
		}
		if err := call(c, "clanker.repo_add", rc, &res); err != nil {
			return callErr(stderr, err)
		}
		fmt.Fprintf(stdout, "export CLANKER_IPC_SOCKET=%s\n", shellQuote(res.Socket))
		return exitOK
	case "resume":
		path, _ := filepath.Abs(rest[0])
		var res struct {
			Resumed bool `json:"resumed"`
		}
		if err := call(c, "clanker.resume", map[string]string{"path": path}, &res); err != nil {
			return callErr(stderr, err)
		}
		if res.Resumed {
			fmt.Fprintf(stdout, "%s: resumed\n", path)
		} else {
			fmt.Fprintf(stdout, "%s: was not paused\n", path)
		}
		return exitOK
	}
	var res struct {
		Repos []clanker.RepoStatus `json:"repos"`
	}
	if err := call(c, "clanker.repos", nil, &res); err != nil {
		return callErr(stderr, err)
	}
	if *asJSON {
		return printList(stdout, stderr, "repos", res.Repos, listCut{})
	}
	if len(res.Repos) == 0 {
		fmt.Fprintln(stdout, "no clanker repos ([[clanker.repos]] in the config, or orchestrd clanker serve-repo PATH)")
		return exitOK
	}
	for i, r := range res.Repos {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s\n  socket  %s\n  tasks   %s\n", r.Path, r.Socket, statusCounts(r.Tasks))
		if p := r.Paused; p != nil {
			fmt.Fprintf(stdout, "  PAUSED  by %s (%s): %s; resumes at %s, or: orchestrd clanker resume %s\n",
				render.OneLine(p.Pod), render.OneLine(p.Role), render.OneLine(p.Message), p.Until.Local().Format(time.DateTime),
				shellQuote(r.Path))
		}
		fmt.Fprintf(stdout, "  spool   %d bytes waiting, %d bytes draining, %d bytes dead-lettered\n",
			r.Spool.PendingBytes, r.Spool.DrainingBytes, r.Spool.DeadBytes)
		for _, f := range r.Refused {
			fmt.Fprintf(stdout, "  REFUSED %s %s: neither read nor written until it is a plain file (or directory) of this user\n", f.Path, f.Reason)
		}
		if r.OutboxPending > 0 {
			fmt.Fprintf(stdout, "  waiting %s committed and not yet in their files\n", api.Count(r.OutboxPending, "line"))
		}
		if len(r.Pods) > 0 {
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  POD\tROLE\tPID\tLAST SEEN\t")
			for _, p := range r.Pods {
				seen := render.Age(time.Duration(p.LastSeenMs)*time.Millisecond) + " ago"
				if p.Stale {
					seen += " (stale)"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t\n", render.OneLine(p.ID), render.OneLine(p.Role), p.Pid, seen)
			}
			tw.Flush()
		}
	}
	return exitOK
}

func abs(p string) string {
	if p == "" {
		return ""
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// statusCounts is "2 queued, 1 running" in clanker's status order.
func statusCounts(m map[string]int) string {
	order := []string{"queued", "running", "needs_judge", "rework", "blocked", "paused", "done", "failed"}
	rank := map[string]int{}
	for i, s := range order {
		rank[s] = i
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return rank[keys[i]] < rank[keys[j]] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
