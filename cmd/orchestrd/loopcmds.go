package main

// Loop commands: loops (the tree, as Loopr's TUI draws it), loop plan,
// show, start, pause, resume, cancel, rm, merge, and plan show, approve, reject,
// iterate: each a call of the daemon's loop.* and plan.* methods.

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// loopListMax is the most loops `loops` reads, a page of loopListPage at a
// time.
const (
	loopListPage = 1000
	loopListMax  = 100000
)

// ---- loops ----

const loopsUsage = `orchestrd loops [--home DIR] [--json] [--watch] [--status S] [--type T]

Draws the loops as a tree, as Loopr's TUI does: one line a loop,
"[type] id - status (iteration/max_iterations)", its children indented under
it; a failed or invalidated loop says why in brackets. --status and --type
keep the loops that match (and show them as roots when their parent does
not). --json prints {"loops": [...]}, oldest first. --watch draws the tree
again each time a loop changes, until Ctrl-C.`

func cmdLoops(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("loops")
	home := homeFlag(fs)
	asJSON := fs.Bool("json", false, "print the loops as JSON")
	watch := fs.Bool("watch", false, "draw the tree again whenever a loop changes")
	status := fs.String("status", "", "only loops in status `S` ("+joinStatuses()+")")
	typ := fs.String("type", "", "only loops of type `T` (plan, spec, phase, code)")
	pos, code, ok := parseInterspersed(fs, loopsUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, loopsUsage, stderr, "takes no arguments (got %q)", pos[0])
	}
	if *status != "" && !api.LoopStatus(*status).Valid() {
		return usageError(fs, loopsUsage, stderr, "--status %q is not a loop status (want %s)", *status, joinStatuses())
	}
	if *typ != "" && !api.LoopType(*typ).Valid() {
		return usageError(fs, loopsUsage, stderr, "--type %q is not a loop type (want plan, spec, phase or code)", *typ)
	}
	if *watch && *asJSON {
		return usageError(fs, loopsUsage, stderr, "--watch draws the tree; --json prints it once")
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	params := api.LoopListParams{Status: api.LoopStatus(*status), LoopType: api.LoopType(*typ)}
	if !*watch {
		loops, cut, err := listLoops(c, params)
		if err != nil {
			return callErr(stderr, err)
		}
		if *asJSON {
			return printList(stdout, stderr, "loops", loops, listCut{truncated: cut})
		}
		if len(loops) == 0 {
			fmt.Fprintln(stdout, "no loops")
		}
		drawLoops(stdout, loops)
		if cut {
			moreHint(stderr, len(loops), "loop", "")
		}
		return exitOK
	}
	return watchLoops(c, params, stdout, stderr)
}

func joinStatuses() string {
	s := make([]string, len(api.LoopStatuses))
	for i, v := range api.LoopStatuses {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// listLoops reads every loop params selects, a page at a time; cut says
// it stopped at loopListMax.
func listLoops(c *client.Client, params api.LoopListParams) ([]api.LoopRecord, bool, error) {
	var all []api.LoopRecord
	params.Limit = loopListPage
	for {
		var res api.LoopListResult
		if err := call(c, "loop.list", params, &res); err != nil {
			return nil, false, err
		}
		all = append(all, res.Loops...)
		if res.NextCursor == "" {
			return all, false, nil
		}
		if len(all) >= loopListMax {
			return all, true, nil
		}
		params.Cursor = res.NextCursor
	}
}

// drawLoops writes loops as a tree: roots (and loops whose parent is not
// among them) in the order given, each loop's children under it, indented
// two spaces a level, in id order.
func drawLoops(w io.Writer, loops []api.LoopRecord) {
	byID := make(map[string]bool, len(loops))
	for _, l := range loops {
		byID[l.ID] = true
	}
	children := map[string][]api.LoopRecord{}
	var roots []api.LoopRecord
	for _, l := range loops {
		if l.ParentID != nil && byID[*l.ParentID] {
			children[*l.ParentID] = append(children[*l.ParentID], l)
		} else {
			roots = append(roots, l)
		}
	}
	for _, cs := range children {
		sort.Slice(cs, func(i, j int) bool { return cs[i].ID < cs[j].ID })
	}
	var draw func(l api.LoopRecord, depth int)
	draw = func(l api.LoopRecord, depth int) {
		fmt.Fprintf(w, "%s%s\n", strings.Repeat("  ", depth), loopLine(l))
		for _, ch := range children[l.ID] {
			draw(ch, depth+1)
		}
	}
	for _, r := range roots {
		draw(r, 0)
	}
}

// loopLine is a loop's line in the tree: Loopr's "[type] id - status
// (iteration/max)", then why it failed, in brackets.
func loopLine(l api.LoopRecord) string {
	s := fmt.Sprintf("[%s] %s - %s (%d/%d)", l.LoopType, l.ID, l.Status, l.Iteration, l.MaxIterations)
	if l.Error != "" && (l.Status == api.LoopFailed || l.Status == api.LoopInvalidated) {
		s += " [" + printable(l.Error) + "]"
	}
	if l.Status == api.LoopRunning {
		switch {
		case l.Stage == api.StageApproval && l.ApprovalID != "":
			s += " [plan awaiting approval: orchestrd plan show " + l.ID + "]"
		case l.Stage == api.StageMerge && l.ApprovalID != "":
			s += " [merge into " + l.Base + " awaiting approval: orchestrd plan approve " + l.ID + "]"
		case l.Stage == api.StageChildren:
			s += " [waiting for its children]"
		case l.Stage == api.StageMergeWaiting && l.MergeWait != nil:
			s += " [merge_waiting: " + printable(l.MergeWait.Words()) + ": commit or stash them, then orchestrd loop merge " + l.ID + "]"
		}
		if l.Paused {
			s += " [pausing after this iteration]"
		}
	}
	if l.Status == api.LoopRebasing {
		s += fmt.Sprintf(" [rebasing onto %s: %s]", l.RebaseOnto, api.Count(int(l.RebaseIterations), "rebase iteration"))
		if l.Paused {
			s += " [pausing after this iteration]"
		}
	}
	return s
}

// watchLoops draws the tree, then again after each loop.created or
// loop.updated (changes within a fifth of a second drawn once), until
// Ctrl-C (exit 0) or the daemon goes (exit 1).
func watchLoops(c *client.Client, params api.LoopListParams, stdout, stderr io.Writer) int {
	if err := call(c, "events.subscribe", map[string]any{"kinds": []string{"loop.created", "loop.updated"}}, nil); err != nil {
		return callErr(stderr, err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	clear := isTerminal(stdout)
	draw := func() bool {
		loops, _, err := listLoops(c, params)
		if err != nil {
			callErr(stderr, err)
			return false
		}
		if clear {
			io.WriteString(stdout, "\x1b[H\x1b[2J")
		}
		fmt.Fprintf(stdout, "loops at %s (Ctrl-C to stop)\n", time.Now().Format("15:04:05"))
		if len(loops) == 0 {
			fmt.Fprintln(stdout, "no loops")
		}
		drawLoops(stdout, loops)
		return true
	}
	if !draw() {
		return exitFailure
	}
	events := c.Events()
	var redraw <-chan time.Time
	for {
		select {
		case _, ok := <-events:
			if !ok {
				fmt.Fprintln(stderr, "orchestrd: lost the connection to the daemon")
				return exitFailure
			}
			if redraw == nil {
				redraw = time.After(200 * time.Millisecond)
			}
		case <-redraw:
			redraw = nil
			if !draw() {
				return exitFailure
			}
		case <-sig:
			return exitOK
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ---- loop ----

// loopCommands are the subcommands of `orchestrd loop`.
var loopCommands = map[string]bool{"plan": true, "code": true, "show": true, "start": true, "pause": true, "resume": true, "cancel": true, "rm": true, "merge": true}

const loopUsage = `orchestrd loop plan|code [--home DIR] [--repo DIR] [--base BRANCH] [--max-cost USD] TEXT
orchestrd loop show [--home DIR] [--json] ID
orchestrd loop start|pause|resume|cancel|rm|merge [--home DIR] ID

ID is a loop's id or a unique start of it. plan creates a plan loop for
TEXT in the git repository --repo (default: the one the current directory
is in; outside one, the daemon's [loops] repo) from --base (default: its
current branch) and prints its id; code creates a single code loop (an
agent writing code in a worktree until [loops.code] validation_command
passes); --max-cost fails it budget_exceeded once its agents' tasks (its
children's too) cost more (default: [loops] max_cost_usd). show prints a
loop's record and each iteration: its result and the feedback the next
was given. start starts a pending loop; pause lets the running iteration
finish and starts no new one; resume goes on; cancel stops its agent and
validation job at once, and every loop under it, and prints the loops it
cancelled; rm deletes a loop that is not running, its worktree, branch and
the loops under it. merge tries now the merge of a complete root into its
base that waits (merge_waiting: the base is checked out with uncommitted
changes; commit or stash them first), or again one that failed
(git_failed); it exits 0 once merged.`

func cmdLoop(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("loop")
	home := homeFlag(fs)
	repo := fs.String("repo", "", "plan, code: the git repository `DIR` (default: the current directory's, else [loops] repo)")
	base := fs.String("base", "", "plan: the `BRANCH` the plan starts from and merges into (default: the repo's current branch)")
	asJSON := fs.Bool("json", false, "show: print the record and iterations as JSON")
	maxCost := fs.Float64("max-cost", 0, "plan, code: fail the loop once its agents' tasks cost more than `USD` dollars")
	sub, rest, code, ok := parseSubcommand(fs, loopUsage, args, loopCommands, "want a subcommand: plan, code, show, start, pause, resume, cancel, rm or merge", stdout, stderr)
	if !ok {
		return code
	}
	creates := sub == "plan" || sub == "code"
	if creates {
		if len(rest) == 0 || strings.TrimSpace(strings.Join(rest, " ")) == "" {
			return usageError(fs, loopUsage, stderr, "%s wants the TEXT of the task", sub)
		}
	} else if len(rest) != 1 {
		return usageError(fs, loopUsage, stderr, "%s wants exactly one loop ID", sub)
	}
	if !creates && (*repo != "" || *base != "" || *maxCost != 0) {
		return usageError(fs, loopUsage, stderr, "--repo, --base and --max-cost go with plan and code")
	}
	if *maxCost < 0 || *maxCost > 1e6 || math.IsNaN(*maxCost) {
		return usageError(fs, loopUsage, stderr, "--max-cost must be between 0 and 1000000 dollars, got %v", *maxCost)
	}
	var p api.LoopCreatePlanParams
	if creates {
		top := ""
		if *repo != "" {
			abs, err := filepath.Abs(*repo)
			if err != nil {
				fmt.Fprintf(stderr, "orchestrd: --repo: %v\n", err)
				return exitFailure
			}
			top = abs
		} else {
			// The git repository the current directory is in; outside
			// one, none: the daemon's [loops] repo.
			top = enclosingRepo()
		}
		p = api.LoopCreatePlanParams{Description: strings.Join(rest, " "), Repo: top, Base: *base, MaxCostUSD: *maxCost}
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	switch sub {
	case "plan", "code":
		var res api.LoopCreatePlanResult
		var err error
		if sub == "plan" {
			err = call(c, "loop.create_plan", p, &res)
		} else {
			err = call(c, "loop.create", api.LoopCreateParams{LoopType: api.LoopCode, Description: p.Description,
				Repo: p.Repo, Base: p.Base, MaxCostUSD: p.MaxCostUSD}, &res)
		}
		if err != nil {
			return callErr(stderr, err)
		}
		fmt.Fprintln(stdout, res.ID)
		return exitOK
	}
	id, ok := resolveArg(c, stderr, rest[0], loopIDs)
	if !ok {
		return exitFailure
	}
	switch sub {
	case "show":
		var res api.LoopGetResult
		if err := call(c, "loop.get", map[string]any{"id": id}, &res); err != nil {
			return callErr(stderr, err)
		}
		if *asJSON {
			return printJSON(stdout, stderr, res)
		}
		printLoop(stdout, res, time.Now())
		return exitOK
	}
	method := map[string]string{"start": "loop.start", "pause": "loop.pause", "resume": "loop.resume",
		"cancel": "loop.cancel", "rm": "loop.delete", "merge": "loop.merge"}[sub]
	var res struct {
		Loop  *api.LoopRecord `json:"loop"`
		Loops []string        `json:"loops"` // cancel: the loop and its live descendants
	}
	if err := call(c, method, map[string]any{"id": id}, &res); err != nil {
		return callErr(stderr, err)
	}
	switch {
	case sub == "merge" && res.Loop != nil:
		// Answered once the try is over: merged, still waiting, or failed.
		fmt.Fprintln(stdout, loopLine(*res.Loop))
		if res.Loop.MergedInto == "" {
			if res.Loop.Message != "" {
				fmt.Fprintf(stderr, "orchestrd: loop %s not merged: %s\n", id, printable(res.Loop.Message))
			}
			return exitFailure
		}
	case res.Loop != nil:
		fmt.Fprintln(stdout, loopLine(*res.Loop))
	case sub == "cancel":
		printCancelled(c, stdout, id, res.Loops)
	default:
		fmt.Fprintf(stdout, "%s: deleted\n", id)
	}
	return exitOK
}

// printCancelled says what loop.cancel cancelled: the loop and each live
// descendant, as the tree draws them, now.
func printCancelled(c *client.Client, w io.Writer, id string, ids []string) {
	if len(ids) == 0 {
		ids = []string{id}
	}
	fmt.Fprintf(w, "cancelled %s\n", api.Count(len(ids), "loop"))
	var recs []api.LoopRecord
	for _, l := range ids {
		var g api.LoopGetResult
		if call(c, "loop.get", map[string]any{"id": l}, &g) == nil {
			recs = append(recs, g.Loop)
		} else {
			recs = append(recs, api.LoopRecord{ID: l})
		}
	}
	drawLoops(w, recs)
}

// enclosingRepo is the top of the git repository the current directory is
// in (the first directory up with a .git), or "" outside one.
func enclosingRepo() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// printLoop writes a loop's record as "field  value" lines, then its
// iterations, each with the first lines of its feedback.
func printLoop(w io.Writer, g api.LoopGetResult, now time.Time) {
	l := g.Loop
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("loop", l.ID)
	row("type", string(l.LoopType))
	if l.ParentID != nil {
		row("parent", *l.ParentID)
	}
	st := string(l.Status)
	if l.Error != "" {
		st += " (" + printable(l.Error) + ")"
	}
	row("status", st)
	switch {
	case l.MergeRetryable():
		row("why", printable(l.Message)+" (orchestrd loop merge "+l.ID+" tries it again)")
	case l.Message != "":
		row("why", printable(l.Message))
	}
	if l.ResumeAt != 0 && l.Status == api.LoopPaused {
		at := time.UnixMilli(l.ResumeAt)
		row("resumes", at.Local().Format("2006-01-02 15:04:05")+" (its agent's usage limit; orchestrd loop resume "+l.ID+" resumes it now)")
	}
	if w := l.MergeWait; w != nil && l.Stage == api.StageMergeWaiting {
		row("merge", "merge_waiting: "+printable(w.Words()))
		row("", "into "+w.Into+", checked out in "+printable(w.Checkout)+": commit or stash the changes there, then orchestrd loop merge "+l.ID+
			" (it also tries by itself every little while; your work there is never touched)")
	}
	row("iteration", fmt.Sprintf("%d of at most %d", l.Iteration, l.MaxIterations))
	if l.RebaseOnto != "" {
		verb := "rebased"
		switch {
		case l.Status == api.LoopRebasing:
			verb = "rebasing"
		case l.Status.Terminal() && l.MergedInto == "":
			verb = "stopped rebasing"
		}
		row("rebase", fmt.Sprintf("%s onto %s: %s (not counted in max_iterations)", verb, l.RebaseOnto,
			api.Count(int(l.RebaseIterations), "rebase iteration")))
	}
	row("repo", l.Repo)
	branch := l.Branch + " (from " + l.Base + ")"
	switch {
	case l.MergedInto != "":
		branch += ", merged into " + l.MergedInto
	case l.Status.Terminal():
		branch += ", not merged: it holds the loop's work"
	}
	row("branch", branch)
	if l.Worktree != "" {
		wt := l.Worktree
		if _, err := os.Lstat(wt); err != nil && os.IsNotExist(err) {
			wt += " (removed)"
		}
		row("worktree", wt)
	}
	if l.ValidationCommand != "" {
		row("validation", printable(l.ValidationCommand))
	}
	for _, a := range l.OutputArtifacts {
		row("artifact", printable(a))
	}
	if l.TaskID != "" {
		row("task", l.TaskID)
	}
	if l.JobID != "" {
		row("job", l.JobID)
	}
	if l.TokenUsage != nil || l.MaxCostUSD > 0 {
		cost := render.Usage(l.TokenUsage)
		if l.OwnUsage != nil && l.TokenUsage != nil && *l.OwnUsage != *l.TokenUsage {
			cost += " (its own iterations: " + render.Cost(l.OwnUsage) + ")"
		}
		if l.MaxCostUSD > 0 {
			cost += fmt.Sprintf(", at most $%.4f", l.MaxCostUSD)
		}
		row("cost", cost)
	}
	created := time.UnixMilli(l.CreatedAt)
	row("created", created.Local().Format("2006-01-02 15:04:05")+" ("+render.Age(now.Sub(created))+" ago)")
	row("updated", time.UnixMilli(l.UpdatedAt).Local().Format("2006-01-02 15:04:05"))
	tw.Flush()
	if len(g.Iterations) == 0 {
		return
	}
	fmt.Fprintln(w, "\niterations:")
	for _, it := range g.Iterations {
		res := it.Status
		if it.Passed {
			res = "passed"
		}
		line := fmt.Sprintf("  %d  %s", it.Iteration, res)
		if it.Rebase {
			line += "  rebase"
		}
		if it.TaskID != "" {
			line += "  task " + it.TaskID
		}
		if it.JobID != "" {
			line += "  job " + it.JobID
		}
		if it.Commit != "" {
			line += "  commit " + shortCommit(it.Commit)
		}
		if it.FinishedAt > 0 && it.StartedAt > 0 {
			line += "  " + formatDuration(time.Duration(it.FinishedAt-it.StartedAt)*time.Millisecond)
		}
		if c := render.Cost(it.TokenUsage); c != "-" {
			line += "  " + c
		}
		if it.Denied > 0 {
			line += fmt.Sprintf("  %d denied", it.Denied)
		}
		fmt.Fprintln(w, line)
		if it.Feedback != "" {
			lines := strings.Split(strings.TrimSpace(it.Feedback), "\n")
			const most = 8
			if len(lines) > most {
				lines = append(lines[:most], fmt.Sprintf("... (%s more: loop show --json)", api.Count(len(lines)-most, "line")))
			}
			for _, fl := range lines {
				fmt.Fprintf(w, "      %s\n", printable(fl))
			}
		}
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// ---- plan ----

// planCommands are the subcommands of `orchestrd plan`.
var planCommands = map[string]bool{"show": true, "approve": true, "reject": true, "iterate": true}

const planUsage = `orchestrd plan show [--home DIR] ID
orchestrd plan approve [--home DIR] ID
orchestrd plan reject [--home DIR] ID [REASON]
orchestrd plan iterate [--home DIR] ID FEEDBACK

The plan gate. ID is the plan loop's id (or its approval's), or a unique
start of it. show prints the plan awaiting approval and the specs it
lists; approve spawns one spec loop per spec; reject ends the plan loop
failed, with REASON for the record (--reason REASON says the same);
iterate runs the plan loop again with FEEDBACK (the loops it had spawned
are invalidated).`

func cmdPlan(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("plan")
	home := homeFlag(fs)
	reason := fs.String("reason", "", "reject: why, for the record (or the words after ID)")
	sub, rest, code, ok := parseSubcommand(fs, planUsage, args, planCommands, "want a subcommand: show, approve, reject or iterate", stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case sub == "iterate" && (len(rest) < 2 || strings.TrimSpace(strings.Join(rest[1:], " ")) == ""):
		return usageError(fs, planUsage, stderr, "iterate wants the plan's ID and the FEEDBACK for the planner")
	case sub == "reject" && len(rest) > 1 && *reason != "":
		return usageError(fs, planUsage, stderr, "reject takes its REASON after the ID or as --reason, not both")
	case sub == "reject" && len(rest) < 1:
		return usageError(fs, planUsage, stderr, "reject wants the plan's ID (and a REASON)")
	case sub != "iterate" && sub != "reject" && len(rest) != 1:
		return usageError(fs, planUsage, stderr, "%s wants exactly one plan ID", sub)
	case sub != "reject" && *reason != "":
		return usageError(fs, planUsage, stderr, "--reason goes with reject")
	}
	if sub == "reject" && len(rest) > 1 {
		*reason = strings.Join(rest[1:], " ")
	}
	c, id, ok := dialResolve(*home, rest[0], stderr, loopIDs, approvalIDs)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	switch sub {
	case "show":
		var res struct {
			ID      string   `json:"id"`
			Content string   `json:"content"`
			Specs   []string `json:"specs"`
			Status  string   `json:"status"`
		}
		if err := call(c, "plan.get_preview", map[string]any{"id": id}, &res); err != nil {
			return callErr(stderr, err)
		}
		io.WriteString(stdout, res.Content)
		if !strings.HasSuffix(res.Content, "\n") {
			fmt.Fprintln(stdout)
		}
		if len(res.Specs) > 0 {
			fmt.Fprintf(stdout, "\nspecs to create (%d): %s\n", len(res.Specs), strings.Join(res.Specs, ", "))
		}
		return exitOK
	case "approve":
		var res struct {
			SpecsSpawned int `json:"specs_spawned"`
		}
		if err := call(c, "plan.approve", map[string]any{"id": id, "by": api.ByCLI}, &res); err != nil {
			return callErr(stderr, err)
		}
		if res.SpecsSpawned > 0 {
			fmt.Fprintf(stdout, "approved: %s spawned\n", api.Count(res.SpecsSpawned, "spec loop"))
		} else {
			fmt.Fprintln(stdout, "approved")
		}
	case "reject":
		p := map[string]any{"id": id, "by": api.ByCLI}
		if *reason != "" {
			p["reason"] = *reason
		}
		if err := call(c, "plan.reject", p, nil); err != nil {
			return callErr(stderr, err)
		}
		fmt.Fprintln(stdout, "rejected")
	case "iterate":
		if err := call(c, "plan.iterate", map[string]any{"id": id, "feedback": strings.Join(rest[1:], " "), "by": api.ByCLI}, nil); err != nil {
			return callErr(stderr, err)
		}
		fmt.Fprintln(stdout, "the planner runs again with your feedback")
	}
	return exitOK
}

// parseSubcommand parses a command whose first argument is one of subs
// (flags anywhere among the arguments) and returns it and the arguments
// after it. When ok is false the help or the usage error (want: when there
// is no subcommand) has been printed and code is the exit code.
func parseSubcommand(fs *flag.FlagSet, usage string, args []string, subs map[string]bool, want string, stdout, stderr io.Writer) (sub string, rest []string, code int, ok bool) {
	pos, code, ok := parseInterspersed(fs, usage, args, stdout, stderr)
	if !ok {
		return "", nil, code, false
	}
	if len(pos) == 0 {
		return "", nil, usageError(fs, usage, stderr, "%s", want), false
	}
	if !subs[pos[0]] {
		return "", nil, usageError(fs, usage, stderr, "%s", unknownSub(pos[0], subs)), false
	}
	return pos[0], pos[1:], 0, true
}

// unknownSub says a subcommand is not one of subs, with a suggestion.
func unknownSub(sub string, subs map[string]bool) string {
	msg := fmt.Sprintf("unknown subcommand %q", sub)
	if s := suggest(sub, sortedKeys(subs)); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return msg
}
