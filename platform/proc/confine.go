package proc

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Confine makes each directory of readOnly read-only in this process's
// mount namespace (a read-only copy of its mount put over it), then puts
// each directory of writable back, writable, where a read-only one covers
// it: a loop's agent writes its worktree and nothing else of its
// repository, the shared git directory least of all. It works on
// descriptors from start to end (open_tree, mount_setattr, move_mount),
// each path opened without following a link (RESOLVE_NO_SYMLINKS), so a
// directory an agent or a job turned into a link is refused, never
// followed, and nothing can be swapped between a look and a mount. The
// writable trees are taken before anything is covered. The process must be
// in a mount namespace of its own with CAP_SYS_ADMIN in it; its working
// directory must be entered again after (Chdir by path): one entered
// before still refers to what lies beneath the new mounts.
func Confine(readOnly, writable []string) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	open := func(p string) (int, error) {
		if !filepath.IsAbs(p) {
			return -1, fmt.Errorf("%s: not an absolute path", p)
		}
		fd, err := unix.Openat2(unix.AT_FDCWD, filepath.Clean(p), &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return -1, fmt.Errorf("opening %s without following links: %w", p, err)
		}
		fds = append(fds, fd)
		return fd, nil
	}
	clone := func(fd int, p string) (int, error) {
		t, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err != nil {
			return -1, fmt.Errorf("copying the mount of %s: %w", p, err)
		}
		fds = append(fds, t)
		return t, nil
	}
	// The writable trees, as they are now: before any cover.
	trees := make([]int, len(writable))
	for i, w := range writable {
		fd, err := open(w)
		if err != nil {
			return err
		}
		if trees[i], err = clone(fd, w); err != nil {
			return err
		}
	}
	for _, r := range readOnly {
		fd, err := open(r)
		if err != nil {
			return err
		}
		t, err := clone(fd, r)
		if err != nil {
			return err
		}
		if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("making the copy of %s read-only: %w", r, err)
		}
		if err := unix.MoveMount(t, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("putting %s read-only over itself: %w", r, err)
		}
	}
	for i, w := range writable {
		// Where it is now: through the covers just made.
		at, err := open(w)
		if err != nil {
			return err
		}
		if err := unix.MoveMount(trees[i], "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("putting %s back writable: %w", w, err)
		}
	}
	return nil
}

// ConfineArgs are sandbox-exec's arguments for Confine: --ro DIR for each
// read-only directory, --rw DIR for each writable one.
func ConfineArgs(readOnly, writable []string) []string {
	var a []string
	for _, r := range readOnly {
		a = append(a, "--ro", r)
	}
	for _, w := range writable {
		a = append(a, "--rw", w)
	}
	return a
}
