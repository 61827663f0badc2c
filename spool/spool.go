// Package spool is clanker's NDJSON spool (spec 003): the file
// .clanker/ipc-spool.ndjson a pod appends its requests to, one JSON line
// each ({"ts","type","payload"}, wire.DecodeSpoolLine), while the repo's
// socket is down, and its drain as files: taking the spool from its
// writers (renamed to ipc-spool.draining.ndjson), waiting for the writers
// that still had it open, reading its lines in order from an offset
// (Read), and the dead-letter file ipc-spool.dead.ndjson of the lines that
// cannot be applied (DeadEntry). What a line does, and committing it with
// the offset after it, is its reader's: the clanker domain (clanker/)
// applies the lines through its handlers from its repo's actor.
//
// Every file is reached through a beneath.Dir of the repo's .clanker,
// without following a link (platform/beneath).
package spool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/orchestrd/orchestrd/platform/beneath"
)

// Names of the spool's files under a repo's .clanker directory.
const (
	// Name is the spool the pods append to.
	Name = "ipc-spool.ndjson"
	// DrainingName is the spool taken from its writers, being read.
	DrainingName = "ipc-spool.draining.ndjson"
	// DeadName holds the lines that could not be applied, with their
	// errors (DeadEntry).
	DeadName = "ipc-spool.dead.ndjson"
)

const (
	// Batch is the most lines a drain applies a tick.
	Batch = 200
	// WritersGrace bounds the wait for the writers that had the spool
	// open when it was taken (an append is one open-write-close): past it
	// the drain reads what is there.
	WritersGrace = 10 * time.Second
)

// Pos is how far the drain of the taken file got: the offset after the
// last line whose effects are committed, in the file of inode Ino. Its
// reader records it with those effects.
type Pos struct {
	Ino    uint64 `json:"ino"`
	Offset int64  `json:"offset"`
}

// Take takes the spool from its writers: renames it to DrainingName, if
// it is a regular file of the daemon's uid with lines in it, so a pod's
// next append creates a new spool. found: the spool was such a file (a
// rename that failed included); err: opening it or renaming it failed
// (a *beneath.RefusedError for a link, a FIFO, another uid's file). A
// spool that is absent or empty is neither found nor an error.
func Take(d *beneath.Dir) (found bool, err error) {
	f, err := d.Open(Name)
	if beneath.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	info, err := beneath.Stat(f)
	f.Close()
	if err != nil || info.Size == 0 {
		return false, nil
	}
	if err := d.Rename(Name, DrainingName); err != nil {
		return true, fmt.Errorf("taking the spool: %w", err)
	}
	return true, nil
}

// Writing reports whether the taken file at path (absolute) may still be
// appended to: a process holds it open (a writer that opened the spool
// before it was taken finishes its append first) and it was taken less
// than WritersGrace before now.
func Writing(path string, takenAt, now time.Time) bool {
	open, err := openedBy(path)
	return err == nil && open && now.Sub(takenAt) < WritersGrace
}

// openedBy reports whether a process (readable by this uid) holds path
// open: a writer that opened the spool before it was taken away may still
// append to it. Each /proc/PID/fd/N link is read; an unreadable process is
// another uid's, whose appends the spool's mode would refuse anyway.
func openedBy(path string) (bool, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false, err
	}
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		name := p.Name()
		if name == self || name[0] < '0' || name[0] > '9' {
			continue
		}
		fdDir := "/proc/" + name + "/fd"
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(fdDir + "/" + fd.Name()); err == nil && l == path {
				return true, nil
			}
		}
	}
	return false, nil
}

// Sizes are the bytes of a repo's spool files: what waits in the spool,
// what is left to read of the taken file (after pos, when not nil), what
// the dead-letter file holds. A file that is absent or not a regular file
// counts 0.
func Sizes(d *beneath.Dir, pos *Pos) (pending, draining, dead int64) {
	if info, err := d.Lstat(Name); err == nil && info.IsRegular() {
		pending = info.Size
	}
	if info, err := d.Lstat(DrainingName); err == nil && info.IsRegular() {
		draining = info.Size
		if pos != nil {
			draining -= pos.Offset
		}
	}
	if info, err := d.Lstat(DeadName); err == nil && info.IsRegular() {
		dead = info.Size
	}
	return pending, draining, dead
}

// FirstLineCut is said after the error of a line that may be cut: the
// first line of a taken file that is not JSON, for a pod trims a spool
// over 1 MB from its start (clanker's appendSpool).
const FirstLineCut = " (the first line of a spool its writers trimmed to 1 MB may be cut)"

// MayBeCut: l is the first line of its file and not JSON (FirstLineCut).
func (l Line) MayBeCut() bool { return l.First && !json.Valid(bytes.TrimSpace(l.Text)) }

// maxDeadLine is the most of a line the dead-letter file keeps.
const maxDeadLine = 64 << 10

// DeadEntry is the dead-letter file's line (with its newline) for a line
// that could not be applied: {"ts", "error", "type"?, "line"}, the error
// as the pod would have heard it, the line's own bytes (its first 64 KiB).
// ts is the time in JavaScript's toISOString form, typ the request's type
// ("" when it has none).
func DeadEntry(ts, msg, typ string, line []byte) []byte {
	text := string(line)
	if len(text) > maxDeadLine {
		text = text[:maxDeadLine] + "…"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		TS    string `json:"ts"`
		Error string `json:"error"`
		Type  string `json:"type,omitempty"`
		Line  string `json:"line"`
	}{ts, msg, typ, text})
	return b.Bytes()
}
