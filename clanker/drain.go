package clanker

import (
	"os"
	"path/filepath"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/spool"
)

// drain applies the spool (package spool: its files, taking it, reading
// it), at most spool.Batch lines a tick, in file order, through the same
// handlers as the socket's requests.
//
// The spool is taken from its writers atomically (spool.Take), so a pod's
// next append creates a new spool, and the taken file is read only once no
// process has it open (spool.Writing). The effects of a tick's lines are
// committed to the store together with the offset after the last of them
// (r.st.Drain), so a daemon killed mid-drain resumes after the last line
// it applied: none is lost, none applied twice. A line that is not valid,
// or that its handler refuses, is appended to the dead-letter file with
// its error (through the same commit) and never tried again. The taken
// file is removed once read to its end; the next spool is taken after
// that.
//
// Every file is reached through the repo's .clanker, d, without following
// a link (see files.go): a spool or a taken file that is a link, a FIFO, a
// hard link or another uid's is refused (clanker.file_refused, once), not
// taken, not read, and left as it is; the drain goes on once it is gone.
func (r *repo) drain(c *actors.Context, d *beneath.Dir) {
	if r.drainPending {
		return // the last batch is committing: next tick
	}
	f, err := d.Open(spool.DrainingName)
	switch {
	case beneath.IsNotExist(err):
		if r.st.Drain != nil { // removed after its last line was committed
			r.st.Drain = nil
			ch := r.newChange("spool")
			ch.saveState = true
			r.commitDrain(c, ch)
			return // the next spool is taken once that is committed
		}
		if !r.take(d) {
			return
		}
		if f, err = d.Open(spool.DrainingName); err != nil {
			r.fileFailed(spool.DrainingName, err)
			return
		}
	case err != nil:
		r.fileFailed(spool.DrainingName, err)
		return
	}
	defer f.Close()
	r.served(spool.DrainingName)
	info, err := beneath.Stat(f)
	if err != nil {
		r.writeFailed(f.Name(), err)
		return
	}
	if r.st.Drain == nil || r.st.Drain.Ino != info.Ino {
		r.st.Drain = &spool.Pos{Ino: info.Ino}
		if r.takenAt.IsZero() {
			r.takenAt = r.now()
		}
	}
	if spool.Writing(filepath.Join(r.dir, spool.DrainingName), r.takenAt, r.now()) {
		return // a writer is still appending: next tick
	}
	r.drainBatch(c, f, info.Size)
}

// take takes the spool from its writers (spool.Take).
func (r *repo) take(d *beneath.Dir) bool {
	found, err := spool.Take(d)
	if found {
		r.served(spool.Name)
	}
	if err != nil {
		r.fileFailed(spool.Name, err)
		return false
	}
	if !found {
		return false
	}
	r.takenAt = r.now()
	return true
}

// drainBatch reads up to spool.Batch lines of the taken file, f, from the
// recorded offset and applies them in one commit.
func (r *repo) drainBatch(c *actors.Context, f *os.File, size int64) {
	ch := r.newChange("spool")
	ch.saveState = true
	applied, dead := 0, 0
	pos, lines, eof, err := spool.Read(f, r.st.Drain.Offset, size, spool.Batch, func(l spool.Line) {
		err := l.Err
		var typ string
		if err == nil {
			typ = l.Entry.Type
			_, err = r.handle(ch, l.Entry.Type, l.Entry.Payload)
		}
		if err != nil {
			dead++
			r.deadLetter(ch, l, typ, err)
			return
		}
		applied++
	})
	if err != nil {
		r.writeFailed(f.Name(), err)
	}
	r.st.Drain.Offset = pos
	if lines == 0 && !eof {
		return
	}
	if eof {
		ino, end := r.st.Drain.Ino, pos
		ch.after = func() {
			// Every line of the taken file is committed: it goes, and the
			// next tick takes the next spool. Only that file, and only as
			// it was read: a taken file of the same name with another inode
			// is a later spool's, with lines not read yet; one that grew
			// since was appended to by a writer that had opened the spool
			// before it was taken and that spool.Writing did not see (one
			// inside open(), its descriptor not yet listed): the next tick
			// reads what it added.
			d, err := r.clanker()
			if err != nil {
				r.openFailed(err)
				return
			}
			defer d.Close()
			if info, err := d.Lstat(spool.DrainingName); err != nil || info.Ino != ino || info.Size > end {
				return
			}
			if err := d.Remove(spool.DrainingName); err != nil && !beneath.IsNotExist(err) {
				r.fileFailed(spool.DrainingName, err)
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

// deadLetter appends a line that cannot be applied to the dead-letter
// file (spool.DeadEntry) through ch's commit. The file keeps the line and
// the error as the pod would have heard it (its own bytes, 0600); the
// event says which line it was, its length and hash, and what was wrong
// without quoting it.
func (r *repo) deadLetter(ch *change, l spool.Line, typ string, err error) {
	msg, log := err.Error(), logText(err)
	if l.MayBeCut() {
		msg, log = msg+spool.FirstLineCut, log+spool.FirstLineCut
	}
	entry := spool.DeadEntry(isoNow(r.now()), msg, typ, l.Text)
	r.addOutbox(ch, filepath.Join(r.dir, spool.DeadName), false, string(entry))
	ch.events = append(ch.events, SpoolDeadLettered{Repo: r.name, Type: knownType(typ), Error: log,
		LineBytes: l.Size, LineSHA256: LineSHA256(l.Text)})
}
