package clanker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/spool"
)

// A repo's .clanker is written by its agents as well as by orchestrd, so
// every file orchestrd reads or writes there is reached through a
// beneath.Dir of it (platform/beneath): one component at a time, never
// through a link, regular files with one link, everything owned by the
// daemon's uid. A refusal is a *beneath.RefusedError, its path relative
// to the Dir it was asked of.

// File modes: what holds a pod's own lines (the dead-letter file) or the
// fleet's state is the daemon's user's alone; clanker's own tools run as
// that user.
const (
	filePerm    = 0o644
	privatePerm = 0o600
	dirPerm     = 0o755
)

// permOf is the mode of a file of .clanker.
func permOf(rel string) os.FileMode {
	switch rel {
	case spool.DeadName, stateName:
		return privatePerm
	}
	return filePerm
}

// subDir opens the directory of rel beneath d, made if missing, and
// returns it with rel's last component (d itself, not to be closed, when
// rel has no directory: then closeFn does nothing).
func subDir(d *beneath.Dir, rel string) (sub *beneath.Dir, base string, closeFn func(), err error) {
	dir, base := path.Split(rel)
	if dir == "" {
		return d, base, func() {}, nil
	}
	sub, err = d.MkdirAll(strings.TrimSuffix(dir, "/"), dirPerm)
	if err != nil {
		return nil, "", nil, err
	}
	return sub, base, func() { sub.Close() }, nil
}

// within makes a refusal met beneath the directory dir (relative to d,
// "" for d) name its path relative to d.
func within(dir string, err error) error {
	var re *beneath.RefusedError
	if dir != "" && errors.As(err, &re) {
		return &beneath.RefusedError{Path: path.Join(dir, re.Path), Reason: re.Reason}
	}
	return err
}

// writeFile replaces rel beneath d with data (beneath's WriteFile: a
// temporary file beside it, given perm, synced, renamed over rel, so a
// reader or a machine that lost power sees the old content or the new; a
// link at rel is replaced, never followed); its directories are made.
// With sync the directory is synced too (the store's power durability);
// without, a power loss may lose the rename, and the store, the truth,
// writes the file again at the repo's start.
func writeFile(d *beneath.Dir, rel string, data []byte, perm os.FileMode, sync bool) error {
	sub, base, done, err := subDir(d, rel)
	if err != nil {
		return err
	}
	defer done()
	return within(path.Dir(rel), sub.WriteFile(base, data, perm, sync))
}

// appendLines appends data (whole lines) to rel beneath d in one write
// (then syncs it, with sync). The file is made with perm, and one looser
// than perm is tightened, on its descriptor.
func appendLines(d *beneath.Dir, rel string, data []byte, perm os.FileMode, sync bool) error {
	f, err := d.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_APPEND, perm)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := beneath.Stat(f)
	if err != nil {
		return fmt.Errorf("appending to %s: %w", f.Name(), err)
	}
	if extra := info.Mode.Perm() &^ perm; extra != 0 {
		if err := f.Chmod(info.Mode.Perm() &^ extra); err != nil {
			return fmt.Errorf("making %s %v: %w", f.Name(), perm, err)
		}
	}
	// A file that does not end with a newline (a writer killed mid-line)
	// gets one first, so the line stays a line.
	if info.Size > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], info.Size-1); err == nil && last[0] != '\n' {
			data = append([]byte{'\n'}, data...)
		}
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("appending to %s: %w", f.Name(), err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", f.Name(), err)
		}
	}
	return nil
}

// appended returns how many of entries (the data appended to rel beneath
// d, in order, each whole lines) the file already ends with: the appends a
// daemon killed before it recorded them made. An outbox replayed after a
// crash appends the rest only, so each entry is appended once. A file
// refused is read as holding none (its lines wait with the rest).
func appended(d *beneath.Dir, rel string, entries [][]byte) int {
	f, err := d.Open(rel)
	if err != nil {
		return 0
	}
	defer f.Close()
	for k := len(entries); k > 0; k-- {
		if endsWith(f, bytes.Join(entries[:k], nil)) {
			return k
		}
	}
	return 0
}

// endsWith: f's content ends with data.
func endsWith(f *os.File, data []byte) bool {
	fi, err := f.Stat()
	if err != nil || fi.Size() < int64(len(data)) || len(data) == 0 {
		return false
	}
	buf := make([]byte, len(data))
	if _, err := f.ReadAt(buf, fi.Size()-int64(len(data))); err != nil && !errors.Is(err, io.EOF) {
		return false
	}
	return bytes.Equal(buf, data)
}

// hashOf is the hash of a file's content, as stored for the projection.
func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// fileWrite is one file writeAll replaces (rel: beneath the Dir given to
// writeAll); err is its outcome.
type fileWrite struct {
	rel  string
	data []byte
	err  error
	tmp  *os.File
	// dir is the directory it is in, tmpName its temporary file's name
	// there.
	dir     *beneath.Dir
	tmpName string
}

// writeAll replaces each file as writeFile does, but syncs the temporary
// files concurrently before the renames: a filesystem commits concurrent
// syncs together, so a batch of task files (a spool tick's 200) costs
// about one journal commit rather than one each. With syncDirs each
// directory is synced once, after the renames.
func writeAll(d *beneath.Dir, ws []*fileWrite, perm os.FileMode, syncDirs bool) {
	type dirOf struct {
		d    *beneath.Dir
		err  error
		used bool
	}
	dirs := map[string]*dirOf{}
	defer func() {
		for _, x := range dirs {
			if x.d != nil && x.d != d {
				x.d.Close()
			}
		}
	}()
	var open []*fileWrite
	for _, w := range ws {
		dir, base := path.Split(w.rel)
		dir = strings.TrimSuffix(dir, "/")
		x := dirs[dir]
		if x == nil {
			x = &dirOf{}
			x.d, _, _, x.err = subDir(d, w.rel)
			dirs[dir] = x
		}
		if x.err != nil {
			w.err = x.err
			continue
		}
		f, tmp, err := x.d.CreateTemp(base, perm)
		if err == nil {
			if _, err = f.Write(w.data); err == nil {
				err = f.Chmod(perm)
			}
			if err != nil {
				f.Close()
				x.d.Remove(tmp)
				err = fmt.Errorf("writing %s: %w", f.Name(), err)
			}
		}
		if err != nil {
			w.err = within(dir, err)
			continue
		}
		w.tmp, w.dir, w.tmpName = f, x.d, tmp
		open = append(open, w)
	}
	work := make(chan *fileWrite)
	var wg sync.WaitGroup
	for range min(len(open), 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range work {
				if err := w.tmp.Sync(); err != nil {
					w.err = fmt.Errorf("syncing %s: %w", w.tmp.Name(), err)
				}
				if err := w.tmp.Close(); err != nil && w.err == nil {
					w.err = fmt.Errorf("writing %s: %w", w.tmp.Name(), err)
				}
			}
		}()
	}
	for _, w := range open {
		work <- w
	}
	close(work)
	wg.Wait()
	for _, w := range open {
		dir, base := path.Split(w.rel)
		if w.err == nil {
			if err := w.dir.Rename(w.tmpName, base); err != nil {
				w.err = within(strings.TrimSuffix(dir, "/"), err)
			} else {
				dirs[strings.TrimSuffix(dir, "/")].used = true
			}
		}
		if w.err != nil {
			w.dir.Remove(w.tmpName)
		}
	}
	if syncDirs {
		for _, x := range dirs {
			if !x.used {
				continue
			}
			if err := x.d.Sync(); err != nil {
				err = fmt.Errorf("syncing %s: %w", x.d.Path(), err)
				for _, w := range open {
					if w.err == nil && w.dir == x.d {
						w.err = err
					}
				}
			}
		}
	}
}
