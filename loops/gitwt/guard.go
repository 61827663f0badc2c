package gitwt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Guard is a copy of what in a repository's git directory names or holds
// code git runs: its config, its hooks/ and info/ (attributes, exclude)
// and each linked worktree's config.worktree. A loop takes one before its
// agent runs and checks the git directory against it after each
// iteration (Restore): the agent's sandbox makes the git directory
// read-only, and this is what is left where no sandbox could be made, and
// for what a validation job (which runs the agent's code, unconfined)
// wrote there.
type Guard struct {
	gitDir  string
	entries map[string]guardEntry // by path relative to the git directory
}

type guardEntry struct {
	mode fs.FileMode // type and permission bits
	data []byte      // a file's content, a link's target
}

// Bounds on what a Guard copies: a git directory's hooks and info hold a
// few dozen small files.
const (
	guardMaxEntries = 4096
	guardMaxBytes   = 16 << 20
)

// guarded are the git directory's paths a Guard copies (a directory
// whole); worktrees/*/config.worktree and worktrees/*/commondir (where a
// worktree's git reads its config from) are added as found.
var guarded = []string{"config", "hooks", "info"}

// guardLockWait bounds the wait for the repository's lock (another loop's
// merge or worktree may hold it).
const guardLockWait = 2 * time.Minute

// Guard copies what of the repository's git directory could make git run
// code (see Guard). It holds the repository's lock while it reads, as
// Restore does: the daemon's own git (another loop's worktree being added
// or removed) is never seen half done and taken for tampering.
func (r *Repo) Guard() (*Guard, error) {
	g := &Guard{gitDir: r.gitDir}
	unlock, err := g.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	m, err := g.read()
	if err != nil {
		return nil, fmt.Errorf("copying %s's config, hooks and info: %w", r.gitDir, err)
	}
	g.entries = m
	return g, nil
}

// read reads the guarded paths as they are now, links never followed.
func (g *Guard) read() (map[string]guardEntry, error) {
	m := map[string]guardEntry{}
	total := 0
	var add func(rel string) error
	add = func(rel string) error {
		p := filepath.Join(g.gitDir, rel)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(m) >= guardMaxEntries {
			return fmt.Errorf("more than %d files in its config, hooks and info: refused", guardMaxEntries)
		}
		e := guardEntry{mode: fi.Mode() & (fs.ModeType | fs.ModePerm)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.data = []byte(t)
		case fi.Mode().IsRegular():
			f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(io.LimitReader(f, int64(guardMaxBytes-total)+1))
			f.Close()
			if err != nil {
				return err
			}
			total += len(b)
			if total > guardMaxBytes {
				return fmt.Errorf("more than %d bytes in its config, hooks and info: refused", guardMaxBytes)
			}
			e.data = b
		case fi.IsDir():
			m[rel] = e
			ents, err := os.ReadDir(p)
			if err != nil {
				return err
			}
			for _, d := range ents {
				if err := add(filepath.Join(rel, d.Name())); err != nil {
					return err
				}
			}
			return nil
		}
		m[rel] = e // a FIFO, a socket, a device: its type alone
		return nil
	}
	for _, rel := range guarded {
		if err := add(rel); err != nil {
			return nil, err
		}
	}
	wts, err := os.ReadDir(filepath.Join(g.gitDir, "worktrees"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, w := range wts {
		if w.IsDir() {
			for _, f := range []string{"config.worktree", "commondir"} {
				if err := add(filepath.Join("worktrees", w.Name(), f)); err != nil {
					return nil, err
				}
			}
		}
	}
	return m, nil
}

// lock takes the repository's lock, which the daemon's git operations on
// it hold.
func (g *Guard) lock() (func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), guardLockWait)
	defer cancel()
	unlock, err := lockRepo(ctx, g.gitDir)
	if err != nil {
		return nil, fmt.Errorf("checking %s's config, hooks and info: %w", g.gitDir, err)
	}
	return unlock, nil
}

func (a guardEntry) equal(b guardEntry) bool {
	return a.mode == b.mode && bytes.Equal(a.data, b.data)
}

// Restore compares the git directory with the copy, puts back every path
// that changed (removes what was added, writes again what was changed or
// removed) and returns the paths that had changed, relative to the git
// directory, sorted; none when nothing had. A worktree's config.worktree
// that is new is a change; one of a worktree that was removed since is
// not.
func (g *Guard) Restore() ([]string, error) {
	unlock, err := g.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	now, err := g.read()
	if err != nil {
		return nil, fmt.Errorf("reading %s's config, hooks and info again: %w", g.gitDir, err)
	}
	var changed []string
	for rel, e := range now {
		old, ok := g.entries[rel]
		if !ok && isNewWorktreeCommondir(rel, e) {
			continue // a worktree made since (by orchestrd, for another loop): git's own
		}
		if !ok || !old.equal(e) {
			changed = append(changed, rel)
		}
	}
	for rel := range g.entries {
		if _, ok := now[rel]; !ok {
			if strings.HasPrefix(rel, "worktrees"+string(filepath.Separator)) {
				if _, err := os.Lstat(filepath.Join(g.gitDir, filepath.Dir(rel))); errors.Is(err, fs.ErrNotExist) {
					continue // its worktree was removed (by orchestrd)
				}
			}
			changed = append(changed, rel)
		}
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	// Remove first, deepest first: what was added, and what changed.
	for i := len(changed) - 1; i >= 0; i-- {
		rel := changed[i]
		if _, ok := now[rel]; !ok {
			continue
		}
		if old, ok := g.entries[rel]; ok && old.mode.IsDir() && now[rel].mode.IsDir() {
			continue // a directory whose mode changed is chmodded below
		}
		if err := removeAll(filepath.Join(g.gitDir, rel)); err != nil {
			return changed, fmt.Errorf("removing %s from %s: %w", rel, g.gitDir, err)
		}
	}
	// Then put back, parents first.
	for _, rel := range changed {
		old, ok := g.entries[rel]
		if !ok {
			continue
		}
		if err := g.put(rel, old); err != nil {
			return changed, fmt.Errorf("putting %s back in %s: %w", rel, g.gitDir, err)
		}
		if old.mode.IsDir() {
			// Its children as they were (those removed with it).
			for crel, c := range g.entries {
				if strings.HasPrefix(crel, rel+string(filepath.Separator)) {
					if _, err := os.Lstat(filepath.Join(g.gitDir, crel)); errors.Is(err, fs.ErrNotExist) {
						if err := g.putTree(crel, c); err != nil {
							return changed, fmt.Errorf("putting %s back in %s: %w", crel, g.gitDir, err)
						}
					}
				}
			}
		}
	}
	return changed, nil
}

// putTree puts rel back with the directories above it that are missing.
func (g *Guard) putTree(rel string, e guardEntry) error {
	if d := filepath.Dir(rel); d != "." {
		if _, err := os.Lstat(filepath.Join(g.gitDir, d)); errors.Is(err, fs.ErrNotExist) {
			if pe, ok := g.entries[d]; ok {
				if err := g.putTree(d, pe); err != nil {
					return err
				}
			}
		}
	}
	return g.put(rel, e)
}

// put writes one entry back: a directory made (or its mode set), a file
// written to a temporary beside it and renamed over, a link made.
func (g *Guard) put(rel string, e guardEntry) error {
	p := filepath.Join(g.gitDir, rel)
	switch {
	case e.mode.IsDir():
		if err := os.Mkdir(p, e.mode.Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return os.Chmod(p, e.mode.Perm())
	case e.mode&fs.ModeSymlink != 0:
		_ = os.Remove(p)
		return os.Symlink(string(e.data), p)
	case e.mode.IsRegular():
		tmp := filepath.Join(filepath.Dir(p), ".orchestrd-restore-"+api.RandomHex(8))
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, e.mode.Perm())
		if err != nil {
			return err
		}
		_, err = f.Write(e.data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp, e.mode.Perm())
		}
		if err == nil {
			err = os.Rename(tmp, p)
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
		return err
	}
	return nil // a special file is not made again
}

// isNewWorktreeCommondir: rel is the commondir of a worktree git made
// (pointing at this git directory, as git writes it), which appears when
// a worktree is added beside the loop's.
func isNewWorktreeCommondir(rel string, e guardEntry) bool {
	dir, f := filepath.Split(rel)
	return f == "commondir" && filepath.Dir(filepath.Clean(dir)) == "worktrees" &&
		e.mode.IsRegular() && string(e.data) == "../..\n"
}
