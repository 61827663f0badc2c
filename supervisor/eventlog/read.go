package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/wire"
)

// Query selects log lines. Zero fields match everything.
type Query struct {
	Kinds  []string  // exact kinds, "*", or "prefix.*" patterns, as in Subscribe
	Lane   string    // the line's "lane" field equals Lane
	Job    string    // the line's "job_id" field equals Job
	Since  time.Time // ts at or after Since
	Follow bool      // after the existing lines, wait for new ones until ctx is done
	// Exclude leaves out the kinds it matches (same patterns as Kinds)
	// even when Kinds matches them; they are counted in Stats.Excluded.
	Exclude []string
	// OnIdle, if set, is called whenever a Follow read has caught up with
	// the log, before it waits for more (the events CLI flushes its
	// output then).
	OnIdle func()
}

// Line is one parsed log line.
type Line struct {
	Raw    []byte // the line as written, without the newline (a copy; the callee may keep it)
	TS     time.Time
	Seq    uint64
	Kind   string
	Fields map[string]any // the event's own fields (not ts, seq, kind); numbers are json.Number
}

// Stats counts what a read saw.
type Stats struct {
	Lines     uint64 // well-formed lines read
	Matched   uint64 // lines passed to fn
	Malformed uint64 // lines skipped because they do not parse
	Excluded  uint64 // lines that matched but for Query.Exclude
}

// ErrMalformed is wrapped by ParseLine's errors.
var ErrMalformed = errors.New("malformed event log line")

// maxLine bounds one line; longer ones are skipped as malformed.
var maxLine = 64 << 20

// Polling intervals when following: the fallback when inotify is
// unavailable, and a slow safety net when it is (a missed notification then
// costs at most this much latency, never a hang).
const (
	pollFallback = 250 * time.Millisecond
	pollSafety   = 2 * time.Second
)

// inotifyInit is replaced by tests to exercise the polling fallback.
var inotifyInit = func() (int, error) { return unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC) }

// Read calls fn for each matching line of the log at path: rotated files
// (path.N .. path.1) oldest first, then path itself, in seq order. With
// q.Follow it then waits for new lines until ctx is done, following the log
// across rotations (the file renamed to path.1 and recreated). Malformed
// lines are skipped and counted (see ReadWithStats), never fatal. An error
// from fn stops the read and is returned. When ctx is done Read returns
// ctx.Err(). If neither path nor any rotated file exists the error wraps
// fs.ErrNotExist.
func Read(ctx context.Context, path string, q Query, fn func(Line) error) error {
	_, err := ReadWithStats(ctx, path, q, fn)
	return err
}

// ReadWithStats is Read, also returning how many lines were read, matched
// and skipped as malformed.
func ReadWithStats(ctx context.Context, path string, q Query, fn func(Line) error) (Stats, error) {
	r := newReader(ctx, path, q, fn)
	err := r.run()
	return r.stats, err
}

type reader struct {
	ctx     context.Context
	path    string
	q       Query
	fn      func(Line) error
	match   kindMatcher
	exclude *kindMatcher // nil: nothing excluded
	stats   Stats

	laneNeedle, jobNeedle []byte

	lastSeq   uint64 // highest seq seen
	haveSeq   bool
	minSeq    uint64 // while catching up after losing track: skip seq <= minSeq
	useMinSeq bool
	n         int // lines handled, for periodic ctx checks
}

func newReader(ctx context.Context, path string, q Query, fn func(Line) error) *reader {
	r := &reader{ctx: ctx, path: path, q: q, fn: fn, match: newKindMatcher(q.Kinds)}
	if len(q.Exclude) > 0 {
		m := newKindMatcher(q.Exclude)
		r.exclude = &m
	}
	return r
}

func (r *reader) run() error {
	var w *watcher
	if r.q.Follow {
		// Watch before reading anything, so an append after our last read is
		// always noticed.
		w = newWatcher(r.path)
		defer w.close()
	}
	cur, err := openLogFile(r.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	defer func() {
		if cur != nil {
			cur.f.Close()
		}
	}()
	chain := openChain(r.path, cur)
	if cur == nil && len(chain) == 0 {
		return fmt.Errorf("eventlog: %w", &fs.PathError{Op: "read", Path: r.path, Err: fs.ErrNotExist})
	}
	err = r.readFiles(chain)
	closeAll(chain)
	if err != nil {
		return err
	}
	if cur != nil {
		if err := r.drain(cur); err != nil {
			return err
		}
	}
	if !r.q.Follow {
		if cur != nil {
			return r.finish(cur)
		}
		return nil
	}
	poll := pollSafety
	if w.wake == nil {
		poll = pollFallback
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if cur != nil {
			if err := r.drain(cur); err != nil {
				return err
			}
		}
		next, err := r.checkRotation(cur)
		if err != nil {
			return err
		}
		if next != nil {
			if cur != nil {
				cur.f.Close()
			}
			cur = next
			continue
		}
		if r.q.OnIdle != nil {
			r.q.OnIdle()
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-w.wake: // nil without inotify: never ready
		case <-tick.C:
		}
	}
}

// checkRotation returns the file now at path when it is not cur, after
// reading what cur and any rotated files newer than cur still hold.
func (r *reader) checkRotation(cur *logFile) (*logFile, error) {
	st, err := os.Stat(r.path)
	if err != nil || (cur != nil && os.SameFile(st, cur.info)) {
		return nil, nil // unchanged, or between rename and recreate
	}
	next, err := openLogFile(r.path)
	if err != nil {
		return nil, nil
	}
	// cur was rotated away. Everything written to it was written before the
	// rename, so one more drain sees all of it.
	chain := openChain(r.path, next)
	defer closeAll(chain)
	var newer []*logFile // rotated files written after cur, newest first
	found := false
	if cur != nil {
		if err := r.drain(cur); err != nil {
			next.f.Close()
			return nil, err
		}
		if err := r.finish(cur); err != nil {
			next.f.Close()
			return nil, err
		}
		for _, lf := range chain {
			if os.SameFile(lf.info, cur.info) {
				found = true
				break
			}
			newer = append(newer, lf)
		}
	} else {
		newer = chain
	}
	if !found {
		// Lost track (cur rotated out of the kept set, or we started with no
		// current file): read every rotated file, skipping what we have seen.
		newer = chain
		r.minSeq, r.useMinSeq = r.lastSeq, r.haveSeq
	}
	for i := len(newer) - 1; i >= 0; i-- {
		if err := r.readFile(newer[i]); err != nil {
			next.f.Close()
			return nil, err
		}
	}
	r.useMinSeq = false
	return next, nil
}

func (r *reader) readFiles(files []*logFile) error {
	// files are newest first (.1, .2, ...): read oldest first.
	for i := len(files) - 1; i >= 0; i-- {
		if err := r.readFile(files[i]); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) readFile(lf *logFile) error {
	if err := r.drain(lf); err != nil {
		return err
	}
	return r.finish(lf)
}

// drain reads lf to its current end, handling every complete line and
// keeping a trailing partial line for later.
func (r *reader) drain(lf *logFile) error {
	if st, err := lf.f.Stat(); err == nil && st.Size() < lf.pos {
		// Truncated under us: start over.
		if _, err := lf.f.Seek(0, io.SeekStart); err == nil {
			lf.pos, lf.pending, lf.skipping = 0, lf.pending[:0], false
		}
	}
	if lf.buf == nil {
		lf.buf = make([]byte, 64<<10)
	}
	for {
		n, err := lf.f.Read(lf.buf)
		lf.pos += int64(n)
		chunk := lf.buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				if lf.skipping {
					break
				}
				if len(lf.pending)+len(chunk) > maxLine {
					lf.pending, lf.skipping = lf.pending[:0], true
					r.stats.Malformed++
					break
				}
				lf.pending = append(lf.pending, chunk...)
				break
			}
			line := chunk[:i]
			chunk = chunk[i+1:]
			if lf.skipping {
				lf.skipping = false
				continue
			}
			if len(lf.pending)+len(line) > maxLine {
				lf.pending = lf.pending[:0]
				r.stats.Malformed++
				continue
			}
			if len(lf.pending) > 0 {
				line = append(lf.pending, line...)
				lf.pending = line[:0]
			}
			if err := r.handle(line); err != nil {
				return err
			}
		}
		if err == io.EOF || (err == nil && n == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("eventlog: %w", err)
		}
	}
}

// finish handles a trailing line without a newline in a file that will not
// grow (or that we stop reading): a crash-torn line is counted as malformed.
func (r *reader) finish(lf *logFile) error {
	if len(lf.pending) == 0 {
		return nil
	}
	line := lf.pending
	lf.pending = nil
	return r.handle(line)
}

func (r *reader) handle(raw []byte) error {
	r.n++
	if r.n%256 == 0 {
		if err := r.ctx.Err(); err != nil {
			return err
		}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	// Fast path for lines in the writer's own format: reject non-matching
	// lines from the header and a substring check, validating them without
	// building a map. ParseLine stays the authority for every line passed on.
	if h, ok := parseHeader(raw); ok && !r.mayMatch(&h, raw) {
		if !json.Valid(raw) {
			r.stats.Malformed++
			return nil
		}
		r.stats.Lines++
		r.noteSeq(h.seq)
		return nil
	}
	l, err := ParseLine(raw)
	if err != nil {
		r.stats.Malformed++
		return nil
	}
	r.stats.Lines++
	if r.useMinSeq && l.Seq <= r.minSeq {
		return nil
	}
	r.noteSeq(l.Seq)
	if !r.matches(&l) {
		return nil
	}
	r.stats.Matched++
	return r.fn(l)
}

func (r *reader) noteSeq(seq uint64) {
	if !r.haveSeq || seq > r.lastSeq {
		r.lastSeq, r.haveSeq = seq, true
	}
}

// mayMatch is false when the header or raw bytes prove the line cannot match.
func (r *reader) mayMatch(h *header, raw []byte) bool {
	if !r.match.match(h.kind) {
		return false
	}
	if !r.q.Since.IsZero() && h.ts.Before(r.q.Since) {
		return false
	}
	if r.laneNeedle == nil && r.q.Lane != "" {
		r.laneNeedle = wire.AppendJSONString(nil, r.q.Lane, false)
	}
	if r.jobNeedle == nil && r.q.Job != "" {
		r.jobNeedle = wire.AppendJSONString(nil, r.q.Job, false)
	}
	// A field equal to X contains X's JSON encoding, as the writer escapes it.
	if r.laneNeedle != nil && !bytes.Contains(raw, r.laneNeedle) {
		return false
	}
	if r.jobNeedle != nil && !bytes.Contains(raw, r.jobNeedle) {
		return false
	}
	return true
}

func (r *reader) matches(l *Line) bool {
	if !r.match.match(l.Kind) {
		return false
	}
	if !r.q.Since.IsZero() && l.TS.Before(r.q.Since) {
		return false
	}
	if r.q.Lane != "" {
		if s, _ := l.Fields["lane"].(string); s != r.q.Lane {
			return false
		}
	}
	if r.q.Job != "" {
		if s, _ := l.Fields["job_id"].(string); s != r.q.Job {
			return false
		}
	}
	if r.exclude != nil && r.exclude.match(l.Kind) {
		r.stats.Excluded++
		return false
	}
	return true
}

// header is the ts, seq and kind at the start of a line in the writer's
// format: {"ts":"...","seq":N,"kind":"...".
type header struct {
	ts   time.Time
	seq  uint64
	kind string
}

// parseHeader reads the header of a line in exactly the writer's format,
// without allocating more than the kind. It does not validate the rest.
func parseHeader(raw []byte) (h header, ok bool) {
	rest, ok := bytes.CutPrefix(raw, []byte(`{"ts":"`))
	if !ok {
		return h, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return h, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(rest[:i]))
	if err != nil {
		return h, false
	}
	rest, ok = bytes.CutPrefix(rest[i+1:], []byte(`,"seq":`))
	if !ok {
		return h, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil || (n > 1 && rest[0] == '0') {
		return h, false
	}
	rest, ok = bytes.CutPrefix(rest[n:], []byte(`,"kind":"`))
	if !ok {
		return h, false
	}
	i = bytes.IndexByte(rest, '"')
	if i <= 0 || i+1 >= len(rest) || (rest[i+1] != ',' && rest[i+1] != '}') {
		return h, false
	}
	for _, c := range rest[:i] {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return h, false // not plain ASCII: let ParseLine decode it
		}
	}
	return header{ts: ts, seq: seq, kind: string(rest[:i])}, true
}

// ParseLine parses one log line (without its newline). The line must be a
// single JSON object with a string ts in RFC 3339 format, a non-negative
// integer seq and a non-empty string kind. Errors wrap ErrMalformed.
func ParseLine(raw []byte) (Line, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Line{}, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return Line{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(bytes.TrimSpace(trimmed[dec.InputOffset():])) != 0 {
		return Line{}, fmt.Errorf("%w: data after the object", ErrMalformed)
	}
	l := Line{Fields: m}
	ts, ok := m["ts"].(string)
	if !ok {
		return Line{}, fmt.Errorf("%w: no ts", ErrMalformed)
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Line{}, fmt.Errorf("%w: ts: %v", ErrMalformed, err)
	}
	l.TS = t
	seq, ok := m["seq"].(json.Number)
	if !ok {
		return Line{}, fmt.Errorf("%w: no seq", ErrMalformed)
	}
	if l.Seq, err = strconv.ParseUint(seq.String(), 10, 64); err != nil {
		return Line{}, fmt.Errorf("%w: seq: %v", ErrMalformed, err)
	}
	if l.Kind, _ = m["kind"].(string); l.Kind == "" {
		return Line{}, fmt.Errorf("%w: no kind", ErrMalformed)
	}
	delete(m, "ts")
	delete(m, "seq")
	delete(m, "kind")
	l.Raw = bytes.Clone(trimmed)
	return l, nil
}

// logFile is one open log file and the read position in it.
type logFile struct {
	f        *os.File
	info     os.FileInfo // identity (inode) of the open file
	pos      int64
	buf      []byte
	pending  []byte // partial last line
	skipping bool   // discarding an over-long line up to its newline
}

func openLogFile(name string) (*logFile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &logFile{f: f, info: st}, nil
}

// openChain opens the rotated files path.1, path.2, ... (newest first),
// skipping exclude and duplicates (a rotation between opens).
func openChain(path string, exclude *logFile) []*logFile {
	var out []*logFile
	for _, n := range rotatedIndexes(path) {
		lf, err := openLogFile(rotatedName(path, n))
		if err != nil {
			continue
		}
		dup := exclude != nil && os.SameFile(lf.info, exclude.info)
		for _, o := range out {
			dup = dup || os.SameFile(lf.info, o.info)
		}
		if dup {
			lf.f.Close()
			continue
		}
		out = append(out, lf)
	}
	return out
}

func closeAll(files []*logFile) {
	for _, lf := range files {
		lf.f.Close()
	}
}

// watcher wakes the follow loop on inotify events for the log's files. If
// inotify is unavailable wake is nil and the loop polls.
type watcher struct {
	f    *os.File
	wake chan struct{}
	done chan struct{}
}

func newWatcher(path string) *watcher {
	w := &watcher{}
	fd, err := inotifyInit()
	if err != nil {
		return w
	}
	const mask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
		unix.IN_DELETE | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), mask); err != nil {
		unix.Close(fd)
		return w
	}
	// The fd is non-blocking, so os.File puts it in the runtime poller:
	// Read parks the goroutine and Close wakes it.
	w.f = os.NewFile(uintptr(fd), "inotify")
	w.wake = make(chan struct{}, 1)
	w.done = make(chan struct{})
	go w.loop(filepath.Base(path))
	return w
}

func (w *watcher) loop(base string) {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		relevant := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event { int32 wd; uint32 mask, cookie, len; char name[]; }
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+nameLen)]
			name = bytes.TrimRight(name, "\x00")
			if mask&unix.IN_Q_OVERFLOW != 0 || strings.HasPrefix(string(name), base) {
				relevant = true
			}
			off += unix.SizeofInotifyEvent + nameLen
		}
		if relevant {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (w *watcher) close() {
	if w.f == nil {
		return
	}
	w.f.Close()
	<-w.done
}

// Matcher is q's filter (Kinds, Exclude, Since, Lane, Job; not Follow)
// for lines read elsewhere than a log file: the fleet's.
func (q Query) Matcher() func(*Line) bool {
	return newReader(context.Background(), "", q, nil).matches
}

// Filter is what of a Query another reader of the lines applies: the
// fleet's cluster.events takes it as its params, from `orchestrd events
// --cluster` and the dashboard's events page alike.
type Filter struct {
	Kinds   []string  `json:"kinds,omitempty"`
	Exclude []string  `json:"exclude,omitempty"`
	Lane    string    `json:"lane,omitempty"`
	Job     string    `json:"job,omitempty"`
	Since   time.Time `json:"since,omitzero"`
}

// Filter is q's filter.
func (q Query) Filter() Filter {
	return Filter{Kinds: q.Kinds, Exclude: q.Exclude, Lane: q.Lane, Job: q.Job, Since: q.Since}
}

// Query is the query f is the filter of.
func (f Filter) Query() Query {
	return Query{Kinds: f.Kinds, Exclude: f.Exclude, Lane: f.Lane, Job: f.Job, Since: f.Since}
}
