package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/wire"
)

// maxSymlinks bounds symlink expansion in resolvePath, like the kernel's
// ELOOP limit for a whole lookup.
const maxSymlinks = 40

// checkPaths returns the directory the job runs in ("" = the runner's cwd)
// and, when worktree_dir is set, checks that cwd and every file_paths entry
// stay inside it.
//
// A path is inside when it is inside after filepath.Clean and resolution of
// the symlinks in its existing prefix, and also when resolved the way the
// kernel walks it (a ".." after a symlink climbs from the link's target). The
// second form catches "link/../x", which Clean folds away lexically.
func (r *runner) checkPaths(spec *wire.Job) (string, error) {
	if spec.WorktreeDir == "" {
		dir := spec.Cwd
		if dir == "" {
			return "", nil
		}
		if !filepath.IsAbs(dir) {
			dir = r.cwd + "/" + dir // not cleaned: the kernel walks it, symlinks first
		}
		if err := r.checkShown("working directory", spec.Cwd, dir); err != nil {
			return "", err
		}
		return dir, checkDir("working directory", spec.Cwd, dir)
	}
	wt := spec.WorktreeDir
	if !filepath.IsAbs(wt) {
		wt = r.cwd + "/" + wt
	}
	root, err := resolvePath(filepath.Clean(wt))
	if err != nil {
		return "", fmt.Errorf("worktree_dir %q: %w", spec.WorktreeDir, err)
	}

	dir := root
	if spec.Cwd != "" {
		raw := spec.Cwd
		if !filepath.IsAbs(raw) {
			raw = root + "/" + raw // relative cwd: inside the worktree
		}
		dir, err = inside(root, raw)
		if err != nil {
			return "", fmt.Errorf("cwd %q %w", spec.Cwd, err)
		}
	}
	for i, p := range spec.FilePaths {
		raw := p
		if raw == "" {
			return "", fmt.Errorf("file_paths[%d] is empty", i)
		}
		if !filepath.IsAbs(raw) {
			raw = dir + "/" + raw
		}
		if _, err := inside(root, raw); err != nil {
			return "", fmt.Errorf("file_paths[%d] %q %w", i, p, err)
		}
	}
	if spec.Cwd == "" {
		if err := r.checkShown("worktree_dir", spec.WorktreeDir, dir); err != nil {
			return "", err
		}
		return dir, checkDir("worktree_dir", spec.WorktreeDir, dir)
	}
	if err := r.checkShown("working directory", spec.Cwd, dir); err != nil {
		return "", err
	}
	return dir, checkDir("working directory", spec.Cwd, dir)
}

// checkShown refuses a directory the sandbox hides from jobs (the daemon's
// home, a bring-your-own runner's socket directory, the cgroup tree), by
// its path as given and as the kernel would walk it: the job would
// otherwise find it empty ("does not exist") or, at the mask itself, exec
// would fail with "permission denied", blaming the command.
func (r *runner) checkShown(what, given, path string) error {
	if len(r.hidden) == 0 {
		return nil
	}
	paths := []string{filepath.Clean(path)}
	if res, err := resolvePath(paths[0]); err == nil && res != paths[0] {
		paths = append(paths, res)
	}
	if res, err := resolvePath(path); err == nil && res != paths[0] {
		paths = append(paths, res)
	}
	for _, p := range paths {
		for _, h := range r.hidden {
			if p == h || strings.HasPrefix(p, h+"/") {
				return fmt.Errorf("%s %q is hidden from jobs: it is inside %s, which the sandbox covers (the daemon's home and its sockets are never shown to jobs)", what, given, h)
			}
		}
	}
	return nil
}

// checkDir says why the job cannot run in the directory path, naming it as
// the job gave it (given): the kernel's "no such file or directory" from
// exec would name the command instead.
func checkDir(what, given, path string) error {
	name := fmt.Sprintf("%s %q", what, given)
	if path != given {
		name += fmt.Sprintf(" (%s)", path)
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s is not a directory", name)
	case err == nil:
		if err := unix.Access(path, unix.X_OK); err != nil {
			return fmt.Errorf("%s cannot be entered: %w", name, err)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist", name)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s does not exist: a part of it is not a directory", name)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s cannot be resolved: too many symlinks", name)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// inside resolves raw (absolute, not cleaned) both ways and returns the
// kernel-order resolution if both lie under root (itself resolved).
func inside(root, raw string) (string, error) {
	walked, err := resolvePath(raw)
	if err != nil {
		return "", fmt.Errorf("cannot be resolved: %w", err)
	}
	cleaned, err := resolvePath(filepath.Clean(raw))
	if err != nil {
		return "", fmt.Errorf("cannot be resolved: %w", err)
	}
	for _, p := range [...]string{cleaned, walked} {
		if !under(root, p) {
			return "", fmt.Errorf("resolves to %q, outside worktree_dir %q", p, root)
		}
	}
	return walked, nil
}

func under(root, p string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// resolvePath resolves the absolute path p component by component as the
// kernel would: symlinks are expanded (a ".." after one climbs from its
// target). Once a component does not exist, the rest is joined lexically.
func resolvePath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	resolved := "/"
	rest := p
	links := 0
	missing := false
	for rest != "" {
		var comp string
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			comp, rest = rest, ""
		} else {
			comp, rest = rest[:i], rest[i+1:]
		}
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := resolved + "/" + comp
		if resolved == "/" {
			next = "/" + comp
		}
		if missing {
			resolved = next
			continue
		}
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				missing = true
				resolved = next
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("too many symlinks resolving %q", p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = "/"
		}
		if rest == "" {
			rest = target
		} else {
			rest = target + "/" + rest
		}
	}
	return resolved, nil
}
