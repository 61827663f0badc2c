package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// writeAtomic replaces path with data: a temporary file in the same
// directory, written, synced, renamed over path, so a reader (or a
// machine that lost power) sees the old content or the new, never a part.
// With sync the directory is synced too (the store's power durability),
// so the rename itself survives a power loss; without, a power loss may
// lose the rename, and the store, the truth, writes the file again at the
// repo's start.
func writeAtomic(path string, data []byte, perm os.FileMode, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	ok = true
	if !sync {
		return nil
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// appendLines appends data (whole lines) to path in one write (then syncs
// it, with sync).
func appendLines(path string, data []byte, sync bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("appending to %s: %w", path, err)
	}
	defer f.Close()
	// A file that does not end with a newline (a writer killed mid-line)
	// gets one first, so the line stays a line.
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], fi.Size()-1); err == nil && last[0] != '\n' {
			data = append([]byte{'\n'}, data...)
		}
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("appending to %s: %w", path, err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", path, err)
		}
	}
	return nil
}

// appended returns how many of entries (the data appended to path, in
// order, each whole lines) path already ends with: the appends a daemon
// killed before it recorded them made. An outbox replayed after a crash
// appends the rest only, so each entry is appended once.
func appended(path string, entries [][]byte) int {
	f, err := os.Open(path)
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

// fileWrite is one file writeAll replaces; err is its outcome.
type fileWrite struct {
	path string
	data []byte
	err  error
	tmp  *os.File
}

// writeAll replaces each file as writeAtomic does, but syncs the
// temporary files concurrently before the renames: a filesystem commits
// concurrent syncs together, so a batch of task files (a spool tick's 200)
// costs about one journal commit rather than one each. With syncDirs each
// directory is synced once, after the renames.
func writeAll(ws []*fileWrite, perm os.FileMode, syncDirs bool) {
	made := map[string]bool{}
	var open []*fileWrite
	for _, w := range ws {
		dir := filepath.Dir(w.path)
		if !made[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				w.err = fmt.Errorf("making %s: %w", dir, err)
				continue
			}
			made[dir] = true
		}
		f, err := os.CreateTemp(dir, "."+filepath.Base(w.path)+".tmp-*")
		if err == nil {
			if _, err = f.Write(w.data); err == nil {
				err = f.Chmod(perm)
			}
			if err != nil {
				f.Close()
				os.Remove(f.Name())
			}
		}
		if err != nil {
			w.err = fmt.Errorf("writing %s: %w", w.path, err)
			continue
		}
		w.tmp = f
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
					w.err = fmt.Errorf("syncing %s: %w", w.path, err)
				}
				if err := w.tmp.Close(); err != nil && w.err == nil {
					w.err = fmt.Errorf("writing %s: %w", w.path, err)
				}
			}
		}()
	}
	for _, w := range open {
		work <- w
	}
	close(work)
	wg.Wait()
	dirs := map[string]bool{}
	for _, w := range open {
		if w.err == nil {
			if err := os.Rename(w.tmp.Name(), w.path); err != nil {
				w.err = fmt.Errorf("replacing %s: %w", w.path, err)
			} else {
				dirs[filepath.Dir(w.path)] = true
			}
		}
		if w.err != nil {
			os.Remove(w.tmp.Name())
		}
	}
	if syncDirs {
		for d := range dirs {
			if err := syncDir(d); err != nil {
				for _, w := range open {
					if w.err == nil && filepath.Dir(w.path) == d {
						w.err = err
					}
				}
			}
		}
	}
}
