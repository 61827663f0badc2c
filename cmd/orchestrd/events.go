package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"

	"github.com/orchestrd/orchestrd/api"
)

const eventsName = "orchestrd events"

const eventsUsage = "orchestrd events [--home DIR] [--cluster [--node N]] [--follow] [-n N] [--since S] [--kind K]... [--lane L] [--job ID] [--json] [--utc]"

const eventsDetails = `Prints the supervisor event log, <home>/events.ndjson (rotated files
events.ndjson.N first, oldest first), one event per line: local time (and
the date on every line when the first one shown is not from today), seq,
kind, lane, then the event's fields. Stack traces follow, indented.

  03:12:45.123    1042  runner.exited             review    runner_id=review-1 pid=4242 cause=killed_memory_limit ...

Connection churn (conn.opened, conn.closed) stays in the log but is not
printed unless --kind asks for it: --kind 'conn.*', or --kind '*' for all.
--follow starts from now; with -n or --since it prints that tail first.

--cluster prints the events of every node of the daemon's fleet, as the
fleet keeps them (24 hours at most), each line after its node's name
(--node: one node's); it asks the running daemon, which must be in a
fleet ([cluster]). Without -n it starts from each node's last 1000.

Exit status: 0 on success or Ctrl-C while following, 1 if the log cannot be
read, 2 for bad flags.

Examples:
  orchestrd events -f --lane review
  orchestrd events -n 50 -f
  orchestrd events --since 10m --kind 'runner.*' --kind job.orphaned
  orchestrd events --job 01JD3... --json | jq .
  orchestrd events --cluster -f --kind 'cluster.*'
`

// fieldOrder is the order the CLI prints fields in after ts, seq, kind and
// lane: identity first, then what happened and why, then measurements.
// Fields not listed follow alphabetically.
var fieldOrder = []string{
	"job_id",
	"runner_id",
	"conn_id",
	"actor",
	"pid",
	"pgid",
	"state",
	"reason",
	"policy",
	"cause",
	"error",
	"panic",
	"directive",
	"exit_code",
	"signal",
	"detail",
	"delay_ms",
	"duration_ms",
	"uptime_ms",
	"restarts_in_window",
	"attempt",
}

// churnKinds are the kinds the CLI leaves out unless --kind names them:
// every client connection logs both, and they drown everything else.
var churnKinds = []string{"conn.opened", "conn.closed"}

// eventsEnv is what the events command takes from the world; tests replace
// it.
type eventsEnv struct {
	now func() time.Time
	loc *time.Location
}

// cmdEvents implements `orchestrd events`: it prints the event log in
// <home> and returns the exit status. SIGINT and SIGTERM stop it (status 0
// with --follow).
func cmdEvents(args []string, home string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runEvents(ctx, args, home, stdout, stderr, eventsEnv{now: time.Now, loc: time.Local})
}

// tailFlag is -n: unset, or a count of lines.
type tailFlag struct {
	n   int
	set bool
}

func (f *tailFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *tailFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of events >= 0, got %q", v)
	}
	f.n, f.set = n, true
	return nil
}

type kindsFlag []string

func (k *kindsFlag) String() string { return strings.Join(*k, ",") }

func (k *kindsFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return errors.New("empty kind")
		}
		*k = append(*k, p)
	}
	return nil
}

func runEvents(ctx context.Context, args []string, home string, stdout, stderr io.Writer, env eventsEnv) int {
	flags := newFlags("events")
	var (
		follow, asJSON, utc bool
		kinds               kindsFlag
		tail                tailFlag
		lane, job, since    string
		homeFlag            string
		cluster             bool
		node                string
	)
	def := home
	if def == "" {
		def = "none"
	}
	flags.BoolVar(&follow, "follow", false, "keep printing new events as they are logged, from now on\n(after the tail -n or --since asks for); Ctrl-C stops")
	flags.BoolVar(&follow, "f", false, "short for -follow")
	flags.Var(&tail, "n", "print only the last `N` matching events (with -follow: then follow)")
	flags.Var(&kinds, "kind", "only events of kind `K`; repeatable or comma-separated; \"runner.*\"\nmatches every runner event, \"*\" every event (conn.opened and\nconn.closed are left out unless a -kind names them)")
	flags.StringVar(&lane, "lane", "", "only events of `LANE`")
	flags.StringVar(&job, "job", "", "only events of job `ID` (the job_id field)")
	flags.StringVar(&since, "since", "", "only events at or after `S`: "+sinceForms)
	flags.BoolVar(&asJSON, "json", false, "print the raw NDJSON lines (for jq)")
	flags.BoolVar(&utc, "utc", false, "print times in UTC instead of local time")
	flags.StringVar(&homeFlag, "home", "", "the daemon's home `DIR` (default: "+def+")")
	flags.BoolVar(&cluster, "cluster", false, "every node's events, from the daemon's fleet")
	flags.StringVar(&node, "node", "", "with --cluster: only node `N`'s events")
	usageErr := func(format string, a ...any) int {
		return usageLine(stderr, "events", fmt.Sprintf(format, a...))
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// The format of the other client commands: usage, then options.
			fmt.Fprintf(stdout, "usage: %s\n\noptions:\n", eventsUsage)
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			fmt.Fprintf(stdout, "\n%s", eventsDetails)
			return 0
		}
		return usageErr("%s", flagError(flags, err))
	}
	if flags.NArg() > 0 {
		return usageErr("unexpected argument %q", flags.Arg(0))
	}
	if homeFlag != "" {
		home = homeFlag
	}
	if home == "" {
		return usageErr("no home directory; pass --home DIR")
	}
	loc := env.loc
	if utc {
		loc = time.UTC
	}
	q := eventlog.Query{Kinds: kinds, Lane: lane, Job: job, Follow: follow}
	start := env.now()
	if since != "" {
		t, err := parseSince("--since", since, start, loc)
		if err != nil {
			return usageErr("%v", err)
		}
		q.Since = t
	} else if follow && !tail.set {
		// Following starts from now: the history is what -n and --since
		// are for.
		q.Since = start
	}
	if len(kinds) == 0 {
		q.Exclude = churnKinds
	}
	for _, k := range kinds {
		if !eventlog.Known(k) {
			fmt.Fprintf(stderr, "%s: warning: --kind %q matches no known kind\n", eventsName, k)
		}
	}

	if node != "" && !cluster {
		return usageErr("--node goes with --cluster")
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	h := &humanPrinter{w: out, loc: loc, today: start.In(loc).Format(time.DateOnly), kindW: kindWidth(), laneW: 8}
	if cluster {
		q.Follow = false // the fleet follows; q filters
		return clusterEvents(ctx, home, node, follow, tail, q, asJSON, h, out, stderr)
	}
	path := filepath.Join(home, "events.ndjson")
	emit := func(l eventlog.Line) error {
		if asJSON {
			out.Write(l.Raw)
			return out.WriteByte('\n')
		}
		return h.print(l)
	}
	fn := emit
	q.OnIdle = func() { out.Flush() }
	// With -n the lines read before the reader first catches up are kept
	// in a ring of the last N and printed once it has (or, following, as
	// soon as a line logged after we started comes: that one and all
	// after it are followed, not tail).
	var ring []eventlog.Line
	next, catching := 0, tail.set
	flushTail := func() error {
		catching = false
		for i := range ring {
			if err := emit(ring[(next+i)%len(ring)]); err != nil {
				return err
			}
		}
		ring = nil
		return nil
	}
	if tail.set {
		fn = func(l eventlog.Line) error {
			if catching && follow && !l.TS.Before(start) {
				if err := flushTail(); err != nil {
					return err
				}
			}
			if !catching {
				return emit(l)
			}
			if tail.n == 0 {
				return nil
			}
			if len(ring) < tail.n {
				ring = append(ring, l)
				return nil
			}
			ring[next] = l
			next = (next + 1) % tail.n
			return nil
		}
		q.OnIdle = func() {
			if catching {
				if err := flushTail(); err != nil {
					return // stdout is gone; the next write says so
				}
			}
			out.Flush()
		}
	}
	stats, err := eventlog.ReadWithStats(ctx, path, q, fn)
	if catching && err == nil {
		err = flushTail()
	}
	flushErr := out.Flush()
	if err == nil {
		err = flushErr
	}
	if stats.Malformed > 0 {
		fmt.Fprintf(stderr, "%s: skipped %d malformed line(s) in %s\n", eventsName, stats.Malformed, path)
	}
	switch {
	case err == nil:
		if stats.Matched == 0 {
			hidden := ""
			if stats.Excluded > 0 {
				hidden = fmt.Sprintf("; %s not shown, --kind 'conn.*' shows them", api.Count(int(stats.Excluded), "connection event"))
			}
			fmt.Fprintf(stderr, "%s: no matching events (%d read from %s%s)\n", eventsName, stats.Lines, path, hidden)
		}
		return 0
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		if follow {
			return 0
		}
		return 130
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(stderr, "%s: no event log at %s (is the daemon running with --home %s?)\n", eventsName, path, home)
		return 1
	case errors.Is(err, syscall.EPIPE):
		return 0 // stdout closed (| head)
	default:
		fmt.Fprintf(stderr, "%s: %v\n", eventsName, err)
		return 1
	}
}

// kindWidth is the kind column's width: the longest known kind.
func kindWidth() int {
	w := 0
	for _, k := range eventlog.Kinds() {
		w = max(w, len(k))
	}
	return w
}

var fieldRank = func() map[string]int {
	m := make(map[string]int, len(fieldOrder))
	for i, f := range fieldOrder {
		m[f] = i
	}
	return m
}()

// humanPrinter prints aligned columns:
//
//	15:04:05.000  seq  kind  lane  key=value ...
//
// followed by multi-line fields (stacks) indented on their own lines. When
// the first line printed is not from today, every line shows its date
// (2006-01-02 15:04:05.000), so that the columns stay where they are and a
// line read alone says its day; otherwise a day that begins while
// following is marked by a line of its own (-- Sat 2025-11-22 CET --).
type humanPrinter struct {
	w       *bufio.Writer
	loc     *time.Location
	today   string
	lastDay string
	dated   bool // every line shows its date
	kindW   int
	laneW   int
	buf     []byte
	keys    []string
}

func (h *humanPrinter) print(l eventlog.Line) error {
	ts := l.TS.In(h.loc)
	day := ts.Format(time.DateOnly)
	switch {
	case h.lastDay == "":
		h.dated = day != h.today
	case day != h.lastDay && !h.dated:
		fmt.Fprintf(h.w, "-- %s --\n", ts.Format("Mon 2006-01-02 MST"))
	}
	h.lastDay = day
	b := h.buf[:0]
	if h.dated {
		b = ts.AppendFormat(b, "2006-01-02 ")
	}
	b = ts.AppendFormat(b, "15:04:05.000")
	b = append(b, "  "...)
	seq := strconv.FormatUint(l.Seq, 10)
	b = appendPad(b, seq, 6, true)
	b = append(b, "  "...)
	b = appendPad(b, l.Kind, h.kindW, false)
	b = append(b, "  "...)
	lane := "-"
	if v, ok := l.Fields["lane"]; ok {
		lane = formatValue(v)
	}
	h.laneW = max(h.laneW, len(lane))
	b = appendPad(b, lane, h.laneW, false)

	keys := h.keys[:0]
	for k := range l.Fields {
		if k != "lane" {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, iok := fieldRank[keys[i]]
		rj, jok := fieldRank[keys[j]]
		switch {
		case iok && jok:
			return ri < rj
		case iok != jok:
			return iok
		}
		return keys[i] < keys[j]
	})
	var blocks []string
	sep := "  "
	for _, k := range keys {
		v := l.Fields[k]
		if s, ok := v.(string); ok && (k == "stack" || strings.Contains(s, "\n")) {
			blocks = append(blocks, k)
			continue
		}
		b = append(b, sep...)
		sep = " "
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, formatValue(v)...)
	}
	b = trimRightSpace(b)
	b = append(b, '\n')
	for _, k := range blocks {
		b = append(b, "    "...)
		b = append(b, k...)
		b = append(b, ":\n"...)
		for _, ln := range strings.Split(strings.TrimRight(l.Fields[k].(string), "\n"), "\n") {
			b = append(b, "        "...)
			b = append(b, strings.TrimRight(ln, " \t\r")...)
			b = append(b, '\n')
		}
	}
	h.buf, h.keys = b, keys
	_, err := h.w.Write(b)
	return err
}

func appendPad(b []byte, s string, width int, right bool) []byte {
	pad := width - utf8.RuneCountInString(s)
	if right {
		for ; pad > 0; pad-- {
			b = append(b, ' ')
		}
		return append(b, s...)
	}
	b = append(b, s...)
	for ; pad > 0; pad-- {
		b = append(b, ' ')
	}
	return b
}

func trimRightSpace(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// formatValue renders a field value for key=value output: strings bare
// unless they need quoting, numbers as written, anything else compact JSON.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		if needsQuote(v) {
			return strconv.Quote(v)
		}
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r == '"' || r == '=' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}

// clusterEvents is events --cluster: cluster.events from the daemon, each
// line filtered by q and printed after its node's name.
func clusterEvents(ctx context.Context, home, node string, follow bool, tail tailFlag, q eventlog.Query,
	asJSON bool, h *humanPrinter, out *bufio.Writer, stderr io.Writer) int {
	c, ok := dial(home, stderr)
	if !ok {
		return 1
	}
	defer c.Close()
	// The fleet filters before it counts the last lines (an older node
	// ignores the filter; the one below still holds).
	params := struct {
		Follow bool   `json:"follow"`
		Node   string `json:"node,omitempty"`
		Last   *int   `json:"last,omitempty"`
		eventlog.Filter
	}{Follow: follow, Node: node, Filter: q.Filter()}
	if tail.set {
		params.Last = &tail.n
	}
	match := q.Matcher()
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "cluster.events", params, nil) }()
	printed, bad := 0, 0
	show := func(data []byte) error {
		var head struct {
			Origin string `json:"origin"`
		}
		l, err := eventlog.ParseLine(data)
		if err != nil || json.Unmarshal(data, &head) != nil {
			bad++
			return nil
		}
		if !match(&l) {
			return nil
		}
		printed++
		if asJSON {
			out.Write(data)
			return out.WriteByte('\n')
		}
		fmt.Fprintf(out, "%-12s ", head.Origin)
		delete(l.Fields, "origin") // printed first
		return h.print(l)
	}
	var err error
loop:
	for {
		select {
		case ev, open := <-c.Events():
			if !open { // the connection ended: the call says how
				err = <-done
				break loop
			}
			if err = show(ev.Data); err != nil {
				break loop
			}
			if len(c.Events()) == 0 {
				out.Flush()
			}
		case err = <-done:
			// The answer comes after the last line pushed: take those.
			for len(c.Events()) > 0 {
				ev, open := <-c.Events()
				if !open {
					break
				}
				if serr := show(ev.Data); serr != nil && err == nil {
					err = serr
				}
			}
			break loop
		}
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "%s: skipped %d malformed line(s) from the fleet\n", eventsName, bad)
	}
	switch {
	case err == nil:
		if printed == 0 {
			fmt.Fprintf(stderr, "%s: no matching events in the fleet\n", eventsName)
		}
		return 0
	case ctx.Err() != nil:
		if follow {
			return 0
		}
		return 130
	case errors.Is(err, syscall.EPIPE):
		return 0
	default:
		return callErr(stderr, err)
	}
}
