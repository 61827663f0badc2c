// Package beneath opens files and directories beneath a directory without
// following a link, the one way orchestrd touches a tree that someone
// else can write (a clanker repo's .clanker, a Loopsy transfer's allowed
// root).
//
// Every path given to a Dir is relative and is walked one component at a
// time: each directory on the way is opened with openat(2) relative to the
// one before it, O_NOFOLLOW|O_DIRECTORY, and checked (a real directory,
// owned as the Dir allows) before the next is looked up through it; the
// last component is opened O_NOFOLLOW too. So nothing can be reached
// through a symbolic link, a "..", an absolute path or a directory swapped
// for a link between a check and the open: the object checked is the
// object used, through its descriptor. Files must be regular files (a
// FIFO, a device or a socket is refused, and opening one never blocks)
// with a single link (a hard link to a file elsewhere is refused), and
// every object's owner must be one the Dir allows.
//
// A refusal is a *RefusedError naming the path (as given, relative to the
// Dir) and why; errors.Is(err, ErrRefused) tells it from an I/O error.
package beneath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrRefused is what every *RefusedError is (errors.Is).
var ErrRefused = errors.New("refused")

// RefusedError says which path was refused and why ("is a symbolic link",
// "is owned by uid 1001", "has 2 links"...).
type RefusedError struct {
	Path   string // relative to the Dir, as given
	Reason string
}

func (e *RefusedError) Error() string { return e.Path + ": " + e.Reason }

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Options are what a Dir allows.
type Options struct {
	// Owners are the uids that may own what is opened beneath the Dir
	// (the Dir itself included). Empty: any owner.
	Owners []int
}

// Dir is an open directory. Its methods resolve paths beneath it only.
// A Dir is safe for concurrent use; Close it when done.
type Dir struct {
	f    *os.File
	path string // for messages: the path it was opened by
	opts Options
}

// OpenRoot opens the directory at path, which the caller trusts (links in
// it are followed: it is the operator's configuration), and checks that
// it is a directory owned as opts allows. What is beneath it is then
// reached only through the Dir.
func OpenRoot(path string, opts Options) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	d := &Dir{f: os.NewFile(uintptr(fd), path), path: path, opts: opts}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.f.Close()
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := d.checkOwner(".", &st); err != nil {
		d.f.Close()
		return nil, err
	}
	return d, nil
}

// Path is the path the Dir was opened by (for messages; the Dir itself
// does not go through it again).
func (d *Dir) Path() string { return d.path }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Fd is the directory's descriptor (valid until Close).
func (d *Dir) Fd() int { return int(d.f.Fd()) }

// Sync syncs the directory (a rename or a new file in it survives a power
// loss once synced).
func (d *Dir) Sync() error { return d.f.Sync() }

// split checks rel and returns its components: relative, not empty, and
// without ".", ".." or an empty component.
func split(rel string) ([]string, error) {
	if rel == "" {
		return nil, &RefusedError{Path: rel, Reason: "is empty"}
	}
	if strings.HasPrefix(rel, "/") {
		return nil, &RefusedError{Path: rel, Reason: "is absolute"}
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return nil, &RefusedError{Path: rel, Reason: "holds a NUL byte"}
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		switch c {
		case "", ".":
			return nil, &RefusedError{Path: rel, Reason: "has an empty or \".\" component"}
		case "..":
			return nil, &RefusedError{Path: rel, Reason: "has a \"..\" component"}
		}
	}
	return comps, nil
}

func (d *Dir) checkOwner(rel string, st *unix.Stat_t) error {
	if len(d.opts.Owners) == 0 {
		return nil
	}
	for _, u := range d.opts.Owners {
		if int(st.Uid) == u {
			return nil
		}
	}
	return &RefusedError{Path: rel, Reason: "is owned by uid " + strconv.FormatUint(uint64(st.Uid), 10) + ", which is not allowed"}
}

// typeName names a file type for a refusal.
func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFREG:
		return "a regular file"
	}
	return "of an unknown type"
}

// refusal turns an open's error into a refusal when it means a link or a
// type the Dir does not go through: ELOOP is O_NOFOLLOW meeting a link,
// ENOTDIR O_DIRECTORY meeting something else.
func (d *Dir) refusal(parent int, name, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENXIO) {
		var st unix.Stat_t
		if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return &RefusedError{Path: rel, Reason: "is " + typeName(st.Mode)}
		}
	}
	return &fs.PathError{Op: "open", Path: filepath.Join(d.path, rel), Err: err}
}

// walk opens the directories of comps (all of them when all, else all but
// the last) beneath d, checking each, and returns a descriptor of the last
// one opened (d's own when there is none: then owned is false and the
// caller must not close it).
func (d *Dir) walk(rel string, comps []string, mkdir bool, perm os.FileMode) (fd int, owned bool, err error) {
	fd = int(d.f.Fd())
	for i, c := range comps {
		sub := strings.Join(comps[:i+1], "/")
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && mkdir {
			if err = unix.Mkdirat(fd, c, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
				err = &fs.PathError{Op: "mkdir", Path: filepath.Join(d.path, sub), Err: err}
			} else {
				nfd, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			if _, ok := err.(*fs.PathError); !ok {
				err = d.refusal(fd, c, sub, err)
			}
			if owned {
				unix.Close(fd)
			}
			return -1, false, err
		}
		if owned {
			unix.Close(fd)
		}
		fd, owned = nfd, true
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, false, &fs.PathError{Op: "stat", Path: filepath.Join(d.path, sub), Err: err}
		}
		if err := d.checkOwner(sub, &st); err != nil {
			unix.Close(fd)
			return -1, false, err
		}
	}
	return fd, owned, nil
}

// Dir opens the directory rel beneath d (each component a real directory
// owned as d allows) as a Dir with d's options.
func (d *Dir) Dir(rel string) (*Dir, error) { return d.dir(rel, false, 0) }

// MkdirAll is Dir, making the directories of rel that do not exist with
// perm (less the umask).
func (d *Dir) MkdirAll(rel string, perm os.FileMode) (*Dir, error) { return d.dir(rel, true, perm) }

func (d *Dir) dir(rel string, mkdir bool, perm os.FileMode) (*Dir, error) {
	comps, err := split(rel)
	if err != nil {
		return nil, err
	}
	fd, _, err := d.walk(rel, comps, mkdir, perm)
	if err != nil {
		return nil, err
	}
	return &Dir{f: os.NewFile(uintptr(fd), filepath.Join(d.path, rel)), path: filepath.Join(d.path, rel), opts: d.opts}, nil
}

// parent opens the directory that holds rel's last component and returns
// it with that component's name; closeFn releases it.
func (d *Dir) parent(rel string) (fd int, name string, closeFn func(), err error) {
	comps, err := split(rel)
	if err != nil {
		return -1, "", nil, err
	}
	fd, owned, err := d.walk(rel, comps[:len(comps)-1], false, 0)
	if err != nil {
		return -1, "", nil, err
	}
	closeFn = func() {}
	if owned {
		closeFn = func() { unix.Close(fd) }
	}
	return fd, comps[len(comps)-1], closeFn, nil
}

// OpenFile opens the regular file rel beneath d with flag (os.O_*) and,
// when it creates the file, perm (less the umask). The file must be a
// regular file with one link, owned as d allows; a link, a FIFO, a device
// or a socket at rel is refused (and opening one never blocks). O_TRUNC
// truncates once the file passed the checks: a file refused is left as
// it was.
func (d *Dir) OpenFile(rel string, flag int, perm os.FileMode) (*os.File, error) {
	pfd, name, done, err := d.parent(rel)
	if err != nil {
		return nil, err
	}
	defer done()
	trunc := flag&os.O_TRUNC != 0
	flag &^= os.O_TRUNC
	// O_NONBLOCK: opening a FIFO for reading would wait for a writer.
	fd, err := unix.Openat(pfd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, uint32(perm.Perm()))
	if err != nil {
		return nil, d.refusal(pfd, name, rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: filepath.Join(d.path, rel), Err: err}
	}
	refuse := func(err error) (*os.File, error) {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refuse(&RefusedError{Path: rel, Reason: "is " + typeName(st.Mode) + ", not a regular file"})
	}
	if st.Nlink > 1 {
		return refuse(&RefusedError{Path: rel, Reason: "has " + strconv.FormatUint(uint64(st.Nlink), 10) + " links (a hard link to another file)"})
	}
	if err := d.checkOwner(rel, &st); err != nil {
		return refuse(err)
	}
	if trunc {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return refuse(&fs.PathError{Op: "truncate", Path: filepath.Join(d.path, rel), Err: err})
		}
	}
	// A regular file: blocking I/O as usual.
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, rel)), nil
}

// Open opens the regular file rel beneath d for reading (see OpenFile).
func (d *Dir) Open(rel string) (*os.File, error) { return d.OpenFile(rel, os.O_RDONLY, 0) }

// ReadFile reads the regular file rel beneath d, at most max bytes (more
// is an error saying so; max <= 0 is no limit).
func (d *Dir) ReadFile(rel string, max int64) ([]byte, error) {
	f, err := d.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	if max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("reading %s: larger than %d bytes", f.Name(), max)
	}
	return b, nil
}

// Info is what Lstat says of an entry.
type Info struct {
	Mode  fs.FileMode
	Size  int64
	Ino   uint64
	Dev   uint64
	Nlink uint64
	UID   uint32
	Mtime time.Time
}

// IsRegular: a regular file.
func (i Info) IsRegular() bool { return i.Mode.IsRegular() }

// Lstat describes rel beneath d without following it (a link is
// described as a link).
func (d *Dir) Lstat(rel string) (Info, error) {
	pfd, name, done, err := d.parent(rel)
	if err != nil {
		return Info{}, err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, &fs.PathError{Op: "lstat", Path: filepath.Join(d.path, rel), Err: err}
	}
	return infoOf(&st), nil
}

func infoOf(st *unix.Stat_t) Info {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	return Info{Mode: mode, Size: st.Size, Ino: st.Ino, Dev: uint64(st.Dev), Nlink: uint64(st.Nlink), UID: st.Uid,
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
}

// Stat describes an open file (one OpenFile returned).
func Stat(f *os.File) (Info, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Info{}, &fs.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	return infoOf(&st), nil
}

// Remove removes the file (not a directory) rel beneath d; a link is
// removed, never followed. A rel that does not exist is fs.ErrNotExist.
func (d *Dir) Remove(rel string) error {
	pfd, name, done, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	if err := unix.Unlinkat(pfd, name, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(d.path, rel), Err: err}
	}
	return nil
}

// Rename renames oldRel to newRel, both beneath d, replacing what is at
// newRel (never through a link: a link at newRel is itself replaced).
func (d *Dir) Rename(oldRel, newRel string) error {
	ofd, oname, odone, err := d.parent(oldRel)
	if err != nil {
		return err
	}
	defer odone()
	nfd, nname, ndone, err := d.parent(newRel)
	if err != nil {
		return err
	}
	defer ndone()
	if err := unix.Renameat(ofd, oname, nfd, nname); err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(d.path, oldRel), New: filepath.Join(d.path, newRel), Err: err}
	}
	return nil
}

// ReadDir lists the directory rel beneath d ("." for d itself), sorted by
// name: each entry's name and type as the directory says (Lstat an entry
// before trusting more of it).
func (d *Dir) ReadDir(rel string) ([]fs.DirEntry, error) { return d.ReadDirN(rel, -1) }

// ReadDirN is ReadDir reading at most n entries (n <= 0: all): the first
// n the directory gives, then sorted, so a huge directory costs no more
// than n entries' memory.
func (d *Dir) ReadDirN(rel string, n int) ([]fs.DirEntry, error) {
	var f *os.File
	if rel == "." {
		fd, err := unix.Openat(int(d.f.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: d.path, Err: err}
		}
		f = os.NewFile(uintptr(fd), d.path)
	} else {
		sub, err := d.Dir(rel)
		if err != nil {
			return nil, err
		}
		f = sub.f
	}
	defer f.Close()
	ents, err := f.ReadDir(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", f.Name(), err)
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

// CreateTemp creates a new file beneath d, in the directory of rel, named
// after rel's last component with a random suffix (".NAME.tmp-XXXXXX",
// NAME cut to 200 bytes so that a name of 255 has a temporary too),
// O_EXCL with perm; it returns the file and its path relative to d.
func (d *Dir) CreateTemp(rel string, perm os.FileMode) (*os.File, string, error) {
	comps, err := split(rel)
	if err != nil {
		return nil, "", err
	}
	dirRel := strings.Join(comps[:len(comps)-1], "/")
	base := comps[len(comps)-1]
	if len(base) > 200 {
		base = base[:200]
	}
	for try := 0; ; try++ {
		name := "." + base + ".tmp-" + strconv.FormatUint(uint64(rand.Uint32()), 36)
		tmpRel := name
		if dirRel != "" {
			tmpRel = dirRel + "/" + name
		}
		f, err := d.OpenFile(tmpRel, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, tmpRel, nil
	}
}

// WriteFile replaces rel beneath d with data, atomically: a temporary
// file beside it is written, given perm (exactly: fchmod), synced and
// renamed over rel, so a reader sees the old content or the new. With
// syncDir the directory is synced too, so the rename survives a power
// loss.
func (d *Dir) WriteFile(rel string, data []byte, perm os.FileMode, syncDir bool) error {
	f, tmp, err := d.CreateTemp(rel, perm)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = d.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err := d.Rename(tmp, rel); err != nil {
		return err
	}
	ok = true
	if !syncDir {
		return nil
	}
	comps, _ := split(rel)
	if len(comps) == 1 {
		return d.Sync()
	}
	sub, err := d.Dir(strings.Join(comps[:len(comps)-1], "/"))
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.Sync()
}

// IsNotExist: err says the path does not exist.
func IsNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOENT)
}
