package clanker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/wire"
)

// drain applies the spool, at most spoolBatch lines a tick, in file order,
// through the same handlers as the socket's requests.
//
// The spool is taken from its writers atomically: it is renamed to
// ipc-spool.draining.ndjson, so a pod's next append creates a new spool,
// and the taken file is read only once no process has it open (a writer
// that opened it before the rename finishes its append first). The
// effects of a tick's lines are committed to the store together with the
// offset after the last of them, so a daemon killed mid-drain resumes
// after the last line it applied: none is lost, none applied twice. A line
// that is not valid, or that its handler refuses, is appended to
// ipc-spool.dead.ndjson with its error (through the same commit) and never
// tried again. The taken file is removed once read to its end; the next
// spool is taken after that.
//
// Every file is reached through the repo's .clanker, d, without following
// a link (see files.go): a spool or a taken file that is a link, a FIFO, a
// hard link or another uid's is refused (clanker.file_refused, once), not
// taken, not read, and left as it is; the drain goes on once it is gone.
func (r *repo) drain(c *actors.Context, d *beneath.Dir) {
	if r.drainPending {
		return // the last batch is committing: next tick
	}
	f, err := d.Open(drainingName)
	switch {
	case beneath.IsNotExist(err):
		if r.st.Drain != nil { // removed after its last line was committed
			r.st.Drain = nil
			ch := r.newChange("spool")
			ch.saveState = true
			r.commitDrain(c, ch)
		}
		if !r.take(d) {
			return
		}
		if f, err = d.Open(drainingName); err != nil {
			r.fileFailed(drainingName, err)
			return
		}
	case err != nil:
		r.fileFailed(drainingName, err)
		return
	}
	defer f.Close()
	r.served(drainingName)
	info, err := beneath.Stat(f)
	if err != nil {
		r.writeFailed(f.Name(), err)
		return
	}
	if r.st.Drain == nil || r.st.Drain.Ino != info.Ino {
		r.st.Drain = &drainPos{Ino: info.Ino}
		if r.takenAt.IsZero() {
			r.takenAt = r.now()
		}
	}
	if open, err := openedBy(filepath.Join(r.dir, drainingName)); err == nil && open && r.now().Sub(r.takenAt) < writersGrace {
		return // a writer is still appending: next tick
	}
	r.drainBatch(c, f, info.Size)
}

// take takes the spool from its writers (renames it to the taken file's
// name), if it is a regular file of the daemon's uid with lines in it.
func (r *repo) take(d *beneath.Dir) bool {
	f, err := d.Open(spoolName)
	if beneath.IsNotExist(err) {
		return false
	}
	if err != nil {
		r.fileFailed(spoolName, err)
		return false
	}
	info, err := beneath.Stat(f)
	f.Close()
	if err != nil || info.Size == 0 {
		return false
	}
	r.served(spoolName)
	if err := d.Rename(spoolName, drainingName); err != nil {
		r.fileFailed(spoolName, fmt.Errorf("taking the spool: %w", err))
		return false
	}
	r.takenAt = r.now()
	return true
}

// drainBatch reads up to spoolBatch lines of the taken file, f, from the
// recorded offset and applies them in one commit.
func (r *repo) drainBatch(c *actors.Context, f *os.File, size int64) {
	path := f.Name()
	pos := r.st.Drain.Offset
	if _, err := f.Seek(pos, io.SeekStart); err != nil {
		r.writeFailed(path, err)
		return
	}
	br := bufio.NewReaderSize(f, 64<<10)
	ch := r.newChange("spool")
	ch.saveState = true
	lines, applied, dead := 0, 0, 0
	eof := false
	for lines < spoolBatch {
		line, n, lineLen, err := readSpoolLine(br)
		if n == 0 && err != nil {
			eof = errors.Is(err, io.EOF)
			if !eof {
				r.writeFailed(path, err)
			}
			break
		}
		first := pos == 0
		pos += int64(n)
		if len(bytes.TrimSpace(line)) == 0 && err == nil {
			continue
		}
		lines++
		var typ string
		if err == nil {
			var e wire.SpoolEntry
			if e, err = wire.DecodeSpoolLine(line); err == nil {
				typ = e.Type
				_, err = r.handle(ch, e.Type, e.Payload)
			}
		}
		if err != nil {
			dead++
			r.deadLetter(ch, line, lineLen, typ, err, first)
			continue
		}
		applied++
	}
	if !eof && pos >= size {
		eof = true
	}
	r.st.Drain.Offset = pos
	if lines == 0 && !eof {
		return
	}
	if eof {
		ch.after = func() {
			// Every line of the taken file is committed: it goes, and the
			// next tick takes the next spool.
			d, err := r.clanker()
			if err != nil {
				r.openFailed(err)
				return
			}
			defer d.Close()
			if err := d.Remove(drainingName); err != nil && !beneath.IsNotExist(err) {
				r.fileFailed(drainingName, err)
			}
		}
	}
	if lines > 0 {
		ch.events = append(ch.events, SpoolDrained{Repo: r.name, Lines: lines, Applied: applied, Dead: dead, More: !eof})
	}
	r.commitDrain(c, ch)
}

// commitDrain commits a drain's change; no other drain runs until it is
// done (committed, its file removed if it was the last batch). A store
// failure restarts the repo, which clears the flag as it loads.
func (r *repo) commitDrain(c *actors.Context, ch *change) {
	r.drainPending = true
	after := ch.after
	ch.after = func() {
		if after != nil {
			after()
		}
		r.drainPending = false
	}
	r.commit(c, ch)
}

// readSpoolLine reads one line (without its newline); n is the bytes
// consumed, size the line's length without its newline (and a CR before
// it). A line over wire.MaxClankerLine is consumed whole and returned cut,
// with an error saying so.
func readSpoolLine(br *bufio.Reader) (line []byte, n, size int, err error) {
	var buf []byte
	over := false
	for {
		frag, err := br.ReadSlice('\n')
		n += len(frag)
		size += len(frag)
		if !over {
			if len(buf)+len(frag) > wire.MaxClankerLine+1 {
				over = true
				buf = append(buf, frag[:min(len(frag), 256)]...)
			} else {
				buf = append(buf, frag...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == nil:
			buf = bytes.TrimSuffix(buf, []byte("\n"))
			size--
		case errors.Is(err, io.EOF) && n > 0:
			// A last line without its newline: its writer is done (the
			// file is no longer open), so it is whole.
		default:
			return nil, n, 0, err
		}
		if over {
			return buf, n, size, fmt.Errorf("a spool line over %d bytes", wire.MaxClankerLine)
		}
		if bytes.HasSuffix(buf, []byte("\r")) {
			buf, size = buf[:len(buf)-1], size-1
		}
		return buf, n, size, nil
	}
}

// deadLetter appends a line that cannot be applied to the dead-letter
// file, {"ts", "error", "type"?, "line"}, through ch's commit. The file
// keeps the line and the error as the pod would have heard it (its own
// bytes, 0600); the event says which line it was, its length and hash,
// and what was wrong without quoting it.
func (r *repo) deadLetter(ch *change, line []byte, size int, typ string, err error, first bool) {
	msg, log := err.Error(), logText(err)
	if first && !json.Valid(bytes.TrimSpace(line)) {
		const cut = " (the first line of a spool its writers trimmed to 1 MB may be cut)"
		msg, log = msg+cut, log+cut
	}
	text := string(line)
	if len(text) > 64<<10 {
		text = text[:64<<10] + "…"
	}
	entry := jsonObject("ts", isoNow(r.now()), "error", msg, "type", optional(typ), "line", text)
	r.addOutbox(ch, filepath.Join(r.dir, deadName), false, string(entry)+"\n")
	ch.events = append(ch.events, SpoolDeadLettered{Repo: r.name, Type: knownType(typ), Error: log,
		LineBytes: size, LineSHA256: LineSHA256(line)})
}
