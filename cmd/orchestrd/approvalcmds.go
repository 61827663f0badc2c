package main

// Approval commands: approvals (list, --watch, rules [rm ID]), approve,
// deny, reply. Clients of the approval.* methods on the control socket.

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

const approvalsUsage = `orchestrd approvals [--home DIR] [--all [--limit N]] [--source S] [--json] [--watch]
       orchestrd approvals rules [--home DIR] [--json]
       orchestrd approvals rules rm [--home DIR] ID
       orchestrd approvals telegram import [--home DIR] [--from FILE] [--name NAME]

Lists the pending approvals (--all: the history too, newest first). --watch
prints each new approval as it arrives and, when stdin is a terminal, asks
for a key: [a]llow [d]eny [A]lways [r]eply [s]kip. Resolve one with
'orchestrd approve ID', 'orchestrd deny ID' or 'orchestrd reply ID MESSAGE'.`

// summaryWidth is the SUMMARY column's width when stdout is not a
// terminal (on one, what the other columns leave, at least minSummary).
const (
	summaryWidth = 60
	minSummary   = 20
)

// parseInterspersed parses flags anywhere among the arguments (approve
// ID --always as well as approve --always ID) and returns the positional
// ones; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	for {
		if code, ok := parseFlags(fs, usage, args, stdout, stderr); !ok {
			return nil, code, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		rest := fs.Args()
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), 0, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// approvalSources are where approvals come from, what --source takes.
var approvalSources = []string{api.SourceReachout, api.SourcePlan, api.SourceControl, api.SourceExecutor}

func cmdApprovals(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("approvals")
	home := homeFlag(fs)
	all := fs.Bool("all", false, "the history too: finished approvals, newest first (from the state store)")
	limit := fs.Int("limit", 0, "with --all, at most `N` approvals (default 100)")
	source := fs.String("source", "", "only approvals from `SOURCE` ("+strings.Join(approvalSources, ", ")+")")
	asJSON := fs.Bool("json", false, "print the approvals as JSON")
	watch := fs.Bool("watch", false, "print each new approval as it arrives; on a terminal, ask for a key to resolve it")
	if code, ok := parseFlags(fs, approvalsUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		switch fs.Arg(0) {
		case "rules":
			return cmdApprovalRules(fs.Args()[1:], *home, stdout, stderr)
		case "telegram":
			return cmdApprovalsTelegram(fs.Args()[1:], *home, stdout, stderr)
		}
		return usageError(fs, approvalsUsage, stderr, "unexpected argument %q (the subcommands are rules, telegram import)", fs.Arg(0))
	}
	if *source != "" && !slices.Contains(approvalSources, *source) {
		return usageError(fs, approvalsUsage, stderr, "unknown source %q; the sources are %s", *source, strings.Join(approvalSources, ", "))
	}
	if *limit < 0 || *limit > 10000 {
		return usageError(fs, approvalsUsage, stderr, "--limit must be a number from 1 to 10000, got %d", *limit)
	}
	if *limit > 0 && !*all {
		return usageError(fs, approvalsUsage, stderr, "--limit goes with --all")
	}
	if *watch && (*all || *asJSON) {
		return usageError(fs, approvalsUsage, stderr, "--watch prints new approvals: not with --all or --json")
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	if *watch {
		return watchApprovals(c, os.Stdin, stdout, stderr)
	}
	params := map[string]any{}
	if *all {
		params["state"] = "all"
	}
	if *limit > 0 {
		params["limit"] = *limit
	}
	if *source != "" {
		params["source"] = *source
	}
	var res struct {
		Approvals []api.Approval `json:"approvals"`
		Truncated bool           `json:"truncated"`
	}
	if err := call(c, "approval.list", params, &res); err != nil {
		return callErr(stderr, err)
	}
	if res.Truncated {
		// More of the newest, up to what approval.list gives.
		next := ""
		if n := len(res.Approvals); n < approvals.MaxListLimit {
			next = cmdLine(slices.Concat([]string{"approvals"}, opt("--home", *home), []string{"--all", "--limit",
				strconv.Itoa(min(10*n, approvals.MaxListLimit))}, opt("--source", *source), optIf("--json", *asJSON))...)
		}
		defer moreHint(stderr, len(res.Approvals), "approval", next)
	}
	if *asJSON {
		return printList(stdout, stderr, "approvals", res.Approvals, listCut{truncated: res.Truncated})
	}
	if len(res.Approvals) == 0 {
		if *all {
			fmt.Fprintln(stdout, "no approvals")
		} else {
			fmt.Fprintln(stdout, "no pending approvals")
		}
		return exitOK
	}
	printApprovals(stdout, res.Approvals, *all, time.Now())
	return exitOK
}

// printApprovals writes the table: ID, AGE, (STATE, DECISION/BY with
// history), SOURCE, TOOL, SUMMARY, CWD.
func printApprovals(w io.Writer, as []api.Approval, history bool, now time.Time) {
	head := []string{"ID", "AGE"}
	if history {
		head = append(head, "STATE", "DECISION/BY")
	}
	head = append(head, "SOURCE", "TOOL")
	rows := make([][]string, len(as))
	for i, a := range as {
		r := []string{a.ID, render.Age(now.Sub(a.CreatedAt))}
		if history {
			r = append(r, string(a.State), render.DecisionCell(a))
		}
		rows[i] = append(r, a.Source, dash(render.ApprovalTool(a))) // the agent chose it: no terminal escape reaches the screen
	}
	// The summary gets what a terminal's width leaves after the columns
	// before it (each padded by 2) and a CWD column of up to 30.
	width := summaryWidth
	if cols := terminalWidth(w); cols > 0 {
		used := 0
		for j := range head {
			n := len(head[j])
			for _, r := range rows {
				n = max(n, utf8.RuneCountInString(r[j]))
			}
			used += n + 2
		}
		cwd := 3
		for _, a := range as {
			cwd = max(cwd, min(30, utf8.RuneCountInString(render.OneLine(a.Cwd))))
		}
		width = max(minSummary, cols-used-cwd-2)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(append(head, "SUMMARY", "CWD"), "\t"))
	for i, a := range as {
		fmt.Fprintln(tw, strings.Join(append(rows[i], render.Cut(dash(render.ApprovalSummary(a)), width), dash(render.OneLine(a.Cwd))), "\t"))
	}
	tw.Flush()
	// A reason its code does not say enough, said once under the table.
	said := map[string]bool{}
	for _, a := range as {
		if r := a.Resolution; history && r != nil && !said[r.Reason] {
			said[r.Reason] = true
			if words := api.CancelWords(r.Reason); words != "" {
				fmt.Fprintf(w, "%s: %s\n", r.Reason, words)
			}
		}
	}
}

// terminalWidth is w's width in columns when it is a terminal, else 0.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0
	}
	return int(ws.Col)
}

// ---- approve, deny, reply ----

const (
	approveUsage = "orchestrd approve [--home DIR] ID [--always [--suggestion N]] [--message M]"
	denyUsage    = "orchestrd deny [--home DIR] ID [--message M]"
	replyUsage   = "orchestrd reply [--home DIR] ID MESSAGE"
)

func cmdApprove(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("approve")
	home := homeFlag(fs)
	always := fs.Bool("always", false, "allow, and record a rule from a permission suggestion so that the like is allowed from now on")
	suggestion := fs.Int("suggestion", -1, "with --always, the permission suggestion to apply: its index `N` (default the first)")
	message := fs.String("message", "", "a `MESSAGE` for the agent")
	arg, code, ok := parseOneID(fs, approveUsage, args, "want exactly one approval ID", stdout, stderr)
	if !ok {
		return code
	}
	params := map[string]any{"id": arg, "decision": api.DecisionAllow, "by": api.ByCLI}
	if *always {
		params["decision"] = api.DecisionAlwaysAllow
		if *suggestion >= 0 {
			params["suggestion"] = *suggestion
		}
	} else if *suggestion >= 0 {
		return usageError(fs, approveUsage, stderr, "--suggestion goes with --always")
	}
	if *message != "" {
		params["message"] = *message
	}
	return resolveCmd(*home, params, stdout, stderr)
}

func cmdDeny(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("deny")
	home := homeFlag(fs)
	message := fs.String("message", "", "a `MESSAGE` for the agent: why not")
	arg, code, ok := parseOneID(fs, denyUsage, args, "want exactly one approval ID", stdout, stderr)
	if !ok {
		return code
	}
	params := map[string]any{"id": arg, "decision": api.DecisionDeny, "by": api.ByCLI}
	if *message != "" {
		params["message"] = *message
	}
	return resolveCmd(*home, params, stdout, stderr)
}

func cmdReply(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reply")
	home := homeFlag(fs)
	pos, code, ok := parseInterspersed(fs, replyUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return usageError(fs, replyUsage, stderr, "want an approval ID and the MESSAGE the agent is told")
	}
	msg := strings.Join(pos[1:], " ")
	if strings.TrimSpace(msg) == "" {
		return usageError(fs, replyUsage, stderr, "the MESSAGE is empty")
	}
	return resolveCmd(*home, map[string]any{"id": pos[0], "decision": api.DecisionReply, "user_message": msg,
		"by": api.ByCLI}, stdout, stderr)
}

// resolveCmd calls approval.resolve and says how the approval ended.
func resolveCmd(home string, params map[string]any, stdout, stderr io.Writer) int {
	c, id, ok := dialResolve(home, params["id"].(string), stderr, approvalIDs)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	params["id"] = id
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	if err := call(c, "approval.resolve", params, &res); err != nil {
		return callErr(stderr, err)
	}
	fmt.Fprintln(stdout, render.Resolved(res.Approval))
	return exitOK
}

// ---- approvals rules ----

const approvalRulesUsage = `orchestrd approvals rules [--home DIR] [--json]
       orchestrd approvals rules rm [--home DIR] ID`

func cmdApprovalRules(args []string, home string, stdout, stderr io.Writer) int {
	fs := newFlags("approvals rules")
	fs.StringVar(&home, "home", home, "daemon home `DIR` (default $ORCHESTRD_HOME or ~/.orchestrd)")
	asJSON := fs.Bool("json", false, "print the rules as JSON")
	pos, code, ok := parseInterspersed(fs, approvalRulesUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case len(pos) == 0:
	case pos[0] != "rm":
		return usageError(fs, approvalRulesUsage, stderr, "unexpected argument %q (the subcommand is rm ID)", pos[0])
	case len(pos) != 2:
		return usageError(fs, approvalRulesUsage, stderr, "rm wants exactly one rule ID")
	}
	c, ok := dial(resolveHome(home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	if len(pos) == 2 {
		if err := call(c, "approval.rule_delete", map[string]any{"id": pos[1]}, nil); err != nil {
			return callErr(stderr, err)
		}
		fmt.Fprintf(stdout, "deleted rule %s\n", pos[1])
		return exitOK
	}
	var res struct {
		Rules []api.ApprovalRule `json:"rules"`
	}
	if err := call(c, "approval.rules", nil, &res); err != nil {
		return callErr(stderr, err)
	}
	return printTable(stdout, stderr, *asJSON, "rules", res.Rules, listCut{}, "no rules", "ID\tORIGIN\tMATCH\tSCOPE\tDECISION",
		func(w io.Writer, r api.ApprovalRule) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Origin, render.RuleMatch(r), render.RuleScope(r), r.Decision)
		})
}

// ---- approvals --watch ----

// watchKinds are the events --watch follows.
var watchKinds = []string{"approval.requested", "approval.resolved", "approval.timed_out", "approval.cancelled",
	"approval.auto_resolved"}

// keyDecision maps a key pressed at --watch's prompt to what it does:
// a decision, "skip", or "" for a key that means nothing.
func keyDecision(key byte) (api.Decision, bool) {
	switch key {
	case 'a', 'y':
		return api.DecisionAllow, true
	case 'd', 'n':
		return api.DecisionDeny, true
	case 'A':
		return api.DecisionAlwaysAllow, true
	case 'r':
		return api.DecisionReply, true
	case 's', '\r', '\n':
		return "", true // skip
	}
	return "", false
}

const watchPrompt = "[a]llow [d]eny [A]lways [r]eply [s]kip? "

// watcher is approvals --watch: one loop over pushed events, the answers
// of the calls it makes on goroutines, the keys read from the terminal and
// the signals.
type watcher struct {
	c              *client.Client
	stdout, stderr io.Writer
	term           *terminal // nil when stdin is not a terminal
	queue          []string  // pending approvals waiting for a key, oldest first
	prompted       string    // the approval the prompt asks about ("" none)
	replying       string    // the approval a reply line is read for
	seen           map[string]bool
	done           map[string]bool // resolved while we watched
	do             chan func()     // call results, run on the loop
}

func watchApprovals(c *client.Client, stdin *os.File, stdout, stderr io.Writer) int {
	w := &watcher{c: c, stdout: stdout, stderr: stderr, seen: map[string]bool{}, done: map[string]bool{},
		do: make(chan func(), 16)}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	if t, err := newTerminal(stdin); err == nil {
		w.term = t
		defer t.restore()
	}
	if err := call(c, "events.subscribe", map[string]any{"kinds": watchKinds}, nil); err != nil {
		return callErr(stderr, err)
	}
	var res struct {
		Approvals []api.Approval `json:"approvals"`
	}
	if err := call(c, "approval.list", nil, &res); err != nil {
		return callErr(stderr, err)
	}
	if w.term == nil {
		fmt.Fprintln(stdout, "watching for approvals (Ctrl-C to stop)")
	} else {
		fmt.Fprintln(stdout, "watching for approvals: a key answers the one asked about (Ctrl-C to stop)")
	}
	for _, a := range res.Approvals {
		w.arrived(a)
	}
	events := c.Events()
	var keys <-chan termInput
	if w.term != nil {
		keys = w.term.results
	}
	for {
		w.prompt()
		select {
		case ev, ok := <-events:
			if !ok {
				fmt.Fprintln(stderr, "orchestrd: lost the connection to the daemon")
				return exitFailure
			}
			w.event(ev.Event, ev.Data)
		case f := <-w.do:
			f()
		case in := <-keys:
			if in.err != nil {
				// The terminal is gone (EOF): go on printing only.
				w.term.restore()
				keys, w.term, w.prompted, w.replying = nil, nil, "", ""
				continue
			}
			w.input(in)
		case <-sig:
			if w.prompted != "" || w.replying != "" {
				fmt.Fprintln(stdout)
			}
			return exitOK
		}
	}
}

// async runs a call on a goroutine and then f with its error on the loop.
func (w *watcher) async(method string, params, result any, f func(error)) {
	go func() {
		err := call(w.c, method, params, result)
		w.do <- func() { f(err) }
	}()
}

func (w *watcher) event(kind string, data json.RawMessage) {
	var e struct {
		ID       string `json:"id"`
		Decision string `json:"decision"`
		By       string `json:"by"`
		Session  string `json:"by_session"`
		Pid      int32  `json:"by_pid"`
		Reason   string `json:"reason"`
		Rule     string `json:"rule"`
		ToolName string `json:"tool_name"`
	}
	if json.Unmarshal(data, &e) != nil || e.ID == "" {
		return
	}
	switch kind {
	case "approval.requested":
		var res struct {
			Approval api.Approval `json:"approval"`
		}
		w.async("approval.get", map[string]any{"id": e.ID}, &res, func(err error) {
			if err != nil {
				fmt.Fprintf(w.stderr, "orchestrd: approval %s: %v\n", e.ID, err)
				return
			}
			w.arrived(res.Approval)
		})
		return
	case "approval.resolved":
		w.ended(e.ID, fmt.Sprintf("%s: %s by %s", e.ID, e.Decision, api.Resolution{By: e.By, BySession: e.Session, ByPid: e.Pid}.Who()))
	case "approval.timed_out":
		w.ended(e.ID, e.ID+": timed out")
	case "approval.cancelled":
		line := fmt.Sprintf("%s: cancelled (%s)", e.ID, e.Reason)
		if words := api.CancelWords(e.Reason); words != "" {
			line += ": " + words
		}
		w.ended(e.ID, line)
	case "approval.auto_resolved":
		w.clearPrompt()
		fmt.Fprintf(w.stdout, "%s: %s %s at once by rule %s\n", e.ID, render.OneLine(e.ToolName), e.Decision, e.Rule)
	}
}

// arrived prints a new approval and, on a terminal, queues it for a key.
func (w *watcher) arrived(a api.Approval) {
	if w.seen[a.ID] {
		return
	}
	w.seen[a.ID] = true
	w.clearPrompt()
	fmt.Fprintf(w.stdout, "%s  %s  %s  %s\n", a.ID, a.Source, dash(render.ApprovalTool(a)), dash(render.ApprovalSummary(a)))
	if a.Cwd != "" || a.SessionID != "" {
		fmt.Fprintf(w.stdout, "    cwd %s  session %s\n", dash(render.OneLine(a.Cwd)), dash(render.OneLine(a.SessionID)))
	}
	if a.State != api.ApprovalPending || w.done[a.ID] {
		fmt.Fprintf(w.stdout, "    already %s\n", render.StateWords(string(a.State)))
		return
	}
	if w.term != nil {
		w.queue = append(w.queue, a.ID)
	}
}

// ended prints an approval's end and takes it out of the queue.
func (w *watcher) ended(id, line string) {
	w.done[id] = true
	w.clearPrompt()
	fmt.Fprintln(w.stdout, line)
	for i, q := range w.queue {
		if q == id {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			break
		}
	}
	if w.prompted == id {
		w.prompted = "" // a key read for it is dropped
	}
}

// clearPrompt ends a prompt line before something else is printed.
func (w *watcher) clearPrompt() {
	if w.term != nil && w.term.asking {
		fmt.Fprint(w.stdout, "\r\x1b[K")
		w.term.asking = false
	}
}

// prompt asks about the first queued approval when nothing is asked.
func (w *watcher) prompt() {
	if w.term == nil || w.replying != "" || w.term.asking || len(w.queue) == 0 {
		return
	}
	if w.prompted == "" {
		w.prompted = w.queue[0]
	}
	fmt.Fprintf(w.stdout, "%s: %s", w.prompted, watchPrompt)
	w.term.asking = true
	if !w.term.reading {
		w.term.read(false)
	}
}

func (w *watcher) input(in termInput) {
	w.term.asking, w.term.reading = false, false
	if w.replying != "" {
		id := w.replying
		w.replying = ""
		msg := strings.TrimSpace(in.line)
		if msg == "" {
			fmt.Fprintln(w.stdout, "(empty reply: skipped)")
			w.skip(id)
			return
		}
		w.resolve(id, api.DecisionReply, msg)
		return
	}
	id := w.prompted
	w.prompted = ""
	if id == "" || w.done[id] {
		fmt.Fprintln(w.stdout)
		return // resolved meanwhile: the key was for it
	}
	d, ok := keyDecision(in.key)
	switch {
	case !ok:
		fmt.Fprintf(w.stdout, "%q? \n", in.key)
		w.prompted = id
	case d == "":
		fmt.Fprintln(w.stdout, "skip")
		w.skip(id)
	case d == api.DecisionReply:
		fmt.Fprint(w.stdout, "reply: ")
		w.replying = id
		w.term.read(true)
	default:
		fmt.Fprintln(w.stdout, d)
		w.resolve(id, d, "")
	}
}

func (w *watcher) skip(id string) {
	for i, q := range w.queue {
		if q == id {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			break
		}
	}
}

func (w *watcher) resolve(id string, d api.Decision, userMessage string) {
	w.skip(id)
	params := map[string]any{"id": id, "decision": d, "by": api.ByCLI}
	if userMessage != "" {
		params["user_message"] = userMessage
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	w.async("approval.resolve", params, &res, func(err error) {
		if err != nil {
			w.clearPrompt()
			callErr(w.stderr, err)
		}
	})
}

// ---- the terminal ----

// terminal reads keys (no echo, no line editing: ICANON and ECHO off, ISIG
// kept so that Ctrl-C is SIGINT) and lines (its own mode) from stdin on a
// goroutine, one read per request, and restores the mode it found.
type terminal struct {
	fd      int
	orig    unix.Termios
	in      *bufio.Reader
	reqs    chan bool // true: a line, false: a key
	results chan termInput
	asking  bool // a prompt is on the screen (the loop's)
	reading bool // a read was asked for and has not answered (the loop's)

	mu       sync.Mutex
	restored bool
}

type termInput struct {
	key  byte
	line string
	err  error
}

func newTerminal(f *os.File) (*terminal, error) {
	fd := int(f.Fd())
	orig, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("stdin is not a terminal: %w", err)
	}
	t := &terminal{fd: fd, orig: *orig, in: bufio.NewReader(f), reqs: make(chan bool, 1),
		results: make(chan termInput, 1)}
	go t.run()
	return t, nil
}

func (t *terminal) read(line bool) {
	t.reading = true
	t.reqs <- line
}

// setMode puts the terminal in key mode (line false) or back in the mode
// it was found in; nothing once restored.
func (t *terminal) setMode(line bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.restored {
		return
	}
	m := t.orig
	if !line {
		m.Lflag &^= unix.ICANON | unix.ECHO
		m.Lflag |= unix.ISIG
		m.Cc[unix.VMIN], m.Cc[unix.VTIME] = 1, 0
	}
	_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, &m)
}

func (t *terminal) restore() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.restored {
		t.restored = true
		_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, &t.orig)
	}
}

func (t *terminal) run() {
	for line := range t.reqs {
		t.setMode(line)
		var in termInput
		if line {
			in.line, in.err = t.in.ReadString('\n')
			if in.err != nil && in.line != "" {
				in.err = nil
			}
		} else {
			in.key, in.err = t.in.ReadByte()
		}
		t.results <- in
		if in.err != nil {
			return
		}
	}
}
