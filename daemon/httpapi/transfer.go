package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/platform/beneath"
)

const (
	// transferIdle is how long a transfer may go without a byte moving
	// before it is cut (a stalled or slow-loris peer).
	transferIdle = 30 * time.Second
	// transferBuf is the copy buffer: a push or pull holds this much of a
	// file in memory, whatever its size.
	transferBuf = 256 << 10
	// maxListEntries bounds /transfer/list's answer; past it the answer
	// says truncated.
	maxListEntries = 10000
	// multipartSlack is what a push body may hold beside the file (the
	// fields and part headers).
	multipartSlack = 1 << 20
)

// transferErr is a refusal with Loopsy's code and an HTTP status.
type transferErr struct {
	status, code int
	reason       string // the event's reason, "" for none
	msg          string
}

func (e *transferErr) Error() string { return e.msg }

func denied(p string) *transferErr {
	return &transferErr{http.StatusForbidden, CodePathDenied, "path_denied", fmt.Sprintf("Path '%s' is not allowed", p)}
}

// paths decides where transfers may go: the real path of a request
// (symlinks and .. resolved) must be under an allowed root and under no
// denied one. Roots are resolved when checked, so a root that is a
// symlink, or that appears later, is handled. What is checked is then
// opened beneath its root (see openBeneath).
type paths struct {
	allowed, denied []string
}

// newPaths adds the always-denied roots to cfg's: ~/.ssh, ~/.gnupg and
// orchestrd's own home (its keys, sockets and state).
func newPaths(cfg TransferConfig, home string) paths {
	p := paths{}
	for _, a := range cfg.AllowedPaths {
		p.allowed = append(p.allowed, expandHome(a))
	}
	for _, d := range cfg.DeniedPaths {
		p.denied = append(p.denied, expandHome(d))
	}
	p.denied = append(p.denied, expandHome("~/.ssh"), expandHome("~/.gnupg"))
	if home != "" {
		p.denied = append(p.denied, home)
	}
	return p
}

func realRoot(r string) string {
	if rr, err := filepath.EvalSymlinks(r); err == nil {
		return rr
	}
	return filepath.Clean(r)
}

func under(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+string(filepath.Separator))
}

// root is the real path of the allowed root that real is under, "" when
// real is under none or under a denied one.
func (ps paths) root(real string) string {
	for _, d := range ps.denied {
		if under(real, realRoot(d)) {
			return ""
		}
	}
	for _, a := range ps.allowed {
		if r := realRoot(a); under(real, r) {
			return r
		}
	}
	return ""
}

func (ps paths) ok(real string) bool { return ps.root(real) != "" }

// openBeneath opens root, the allowed root of the checked real path real,
// and returns it with real relative to it ("." for the root itself; a
// root that is a file is reached from its directory by its name). Every
// open of a transfer then goes through the Dir, one component at a time
// without following a link: real held no link when it was resolved, so a
// directory swapped for a link since is refused on the way down (denied),
// never followed out of the root or into a denied path.
func openBeneath(root, real string) (*beneath.Dir, string, error) {
	rel := "."
	if real != root {
		rel, _ = filepath.Rel(root, real)
	}
	d, err := beneath.OpenRoot(root, beneath.Options{})
	if err != nil && errors.Is(err, syscall.ENOTDIR) && rel == "." {
		rel = filepath.Base(root)
		d, err = beneath.OpenRoot(filepath.Dir(root), beneath.Options{})
	}
	if err != nil {
		return nil, "", err
	}
	return d, rel, nil
}

// openErr answers an open of rel beneath d that failed (raw, as asked;
// dir: a directory was asked for, else a file): a link on the way, or a
// file with a second link (it may be a file elsewhere), is denied; what is
// there but of another type (a directory or a FIFO to pull, a file to
// list) is not what was asked for; anything else is not found.
func openErr(d *beneath.Dir, rel, raw string, err error, dir bool) error {
	what, notKind := "File", &transferErr{http.StatusNotFound, CodeFileNotFound, "", fmt.Sprintf("File not found: %s (not a regular file)", raw)}
	if dir {
		what, notKind = "Directory", &transferErr{http.StatusBadRequest, CodeTransferFailed, "", fmt.Sprintf("Not a directory: %s", raw)}
	}
	if !errors.Is(err, beneath.ErrRefused) {
		return &transferErr{http.StatusNotFound, CodeFileNotFound, "", fmt.Sprintf("%s not found: %s", what, raw)}
	}
	if rel == "." {
		return notKind
	}
	info, lerr := d.Lstat(rel)
	if lerr == nil && info.Mode&fs.ModeSymlink == 0 && (dir && !info.Mode.IsDir() || !dir && !info.IsRegular()) {
		return notKind
	}
	return denied(raw)
}

// resolve returns the real path of raw (absolute): each existing
// component is resolved (symlinks, then ..), in order; missing is the
// part that does not exist yet (for a push), which may not hold "..".
func resolve(raw string) (real string, missing []string, err error) {
	if !filepath.IsAbs(raw) {
		return "", nil, &transferErr{http.StatusBadRequest, CodeInvalidRequest, "", fmt.Sprintf("path must be absolute, got %q", raw)}
	}
	if strings.ContainsRune(raw, 0) {
		return "", nil, &transferErr{http.StatusBadRequest, CodeInvalidRequest, "", "path must not hold a NUL byte"}
	}
	var comps []string
	for _, c := range strings.Split(raw, string(filepath.Separator)) {
		if c != "" && c != "." {
			comps = append(comps, c)
		}
	}
	real = string(filepath.Separator)
	for i, c := range comps {
		next := filepath.Join(real, c)
		if _, err := os.Lstat(next); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				return "", nil, &transferErr{http.StatusInternalServerError, CodeTransferFailed, "", fmt.Sprintf("resolving %q: %v", raw, err)}
			}
			for _, m := range comps[i:] {
				if m == ".." {
					return "", nil, &transferErr{http.StatusBadRequest, CodeInvalidRequest, "",
						fmt.Sprintf("path %q climbs (..) out of a directory that does not exist", raw)}
				}
			}
			return real, comps[i:], nil
		}
		if real, err = filepath.EvalSymlinks(next); err != nil {
			return "", nil, &transferErr{http.StatusNotFound, CodeFileNotFound, "", fmt.Sprintf("resolving %q: %v", raw, err)}
		}
	}
	return real, nil, nil
}

// existing resolves raw, which must exist and be allowed, and opens its
// allowed root: real is its real path, rel that path relative to d (see
// openBeneath). The caller closes d.
func (s *Server) existing(raw string) (real string, d *beneath.Dir, rel string, err error) {
	real, missing, err := resolve(raw)
	if err != nil {
		return "", nil, "", err
	}
	notFound := &transferErr{http.StatusNotFound, CodeFileNotFound, "", fmt.Sprintf("File not found: %s", raw)}
	if len(missing) > 0 {
		if !s.paths.ok(filepath.Join(append([]string{real}, missing...)...)) {
			return "", nil, "", denied(raw)
		}
		return "", nil, "", notFound
	}
	root := s.paths.root(real)
	if root == "" {
		return "", nil, "", denied(raw)
	}
	if d, rel, err = openBeneath(root, real); err != nil {
		if beneath.IsNotExist(err) {
			return "", nil, "", notFound
		}
		return "", nil, "", fmt.Errorf("opening the allowed root %s: %w", root, err)
	}
	return real, d, rel, nil
}

// idleReader extends a read deadline before each read: a peer that stops
// sending for transferIdle is cut, a slow but live one is not.
type idleReader struct {
	r  io.Reader
	rc *http.ResponseController
}

func (ir idleReader) Read(p []byte) (int, error) {
	_ = ir.rc.SetReadDeadline(time.Now().Add(transferIdle))
	return ir.r.Read(p)
}

type idleWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (iw idleWriter) Write(p []byte) (int, error) {
	_ = iw.rc.SetWriteDeadline(time.Now().Add(transferIdle))
	return iw.w.Write(p)
}

func (s *Server) transferFailed(w http.ResponseWriter, r *http.Request, dir, path string, err error) {
	var te *transferErr
	if !errors.As(err, &te) {
		te = &transferErr{http.StatusInternalServerError, CodeTransferFailed, "", err.Error()}
	}
	if te.reason != "" {
		s.emit(TransferDenied{Direction: dir, Path: path, Reason: te.reason, KeyName: keyName(r), Peer: r.RemoteAddr})
	}
	if te.status >= 500 {
		s.log.Warn().Err(err).Str("direction", dir).Str("path", path).Msg("http: transfer failed")
	}
	writeError(w, te.status, te.code, te.msg)
}

// wantChecksum reads an expected SHA-256 (hex, "sha256:" allowed before
// it): "" if none was sent.
func wantChecksum(v string) (string, error) {
	v = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "sha256:")))
	if v == "" {
		return "", nil
	}
	if b, err := hex.DecodeString(v); err != nil || len(b) != sha256.Size {
		return "", &transferErr{http.StatusBadRequest, CodeInvalidRequest, "", "a checksum is the file's SHA-256 in hex (64 characters)"}
	}
	return v, nil
}

// push is POST /transfer/push: multipart with a destPath field (and an
// optional checksum field) before the file part. The file is streamed to
// a temporary file beside its destination, checked, synced, then renamed
// into place: a failed push leaves nothing behind.
func (s *Server) push(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	max := s.cfg.Transfer.MaxFileSize
	if r.ContentLength > max+multipartSlack {
		s.transferFailed(w, r, "push", "", &transferErr{http.StatusRequestEntityTooLarge, CodeTooLarge, "too_large",
			fmt.Sprintf("File exceeds max size of %d bytes", max)})
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "a push is multipart/form-data with a destPath field, then the file")
		return
	}
	bnd := boundary(r)
	if bnd == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "a multipart/form-data body needs a boundary")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, max+multipartSlack)
	mr := multipart.NewReader(idleReader{r.Body, http.NewResponseController(w)}, bnd)
	want, err := wantChecksum(r.Header.Get("X-Loopsy-Checksum"))
	if err != nil {
		s.transferFailed(w, r, "push", "", err)
		return
	}
	dest := ""
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			writeError(w, http.StatusBadRequest, CodeTransferFailed, "No file in request")
			return
		}
		if err != nil {
			s.transferFailed(w, r, "push", dest, bodyErr(err, max))
			return
		}
		switch {
		case part.FileName() == "" && part.FormName() == "destPath":
			b, err := io.ReadAll(io.LimitReader(part, 4097))
			if err != nil || len(b) > 4096 {
				writeError(w, http.StatusBadRequest, CodeInvalidRequest, "destPath must be a path of at most 4096 bytes")
				return
			}
			dest = string(b)
		case part.FileName() == "" && part.FormName() == "checksum":
			b, _ := io.ReadAll(io.LimitReader(part, 256))
			if want, err = wantChecksum(string(b)); err != nil {
				s.transferFailed(w, r, "push", dest, err)
				return
			}
		case part.FileName() != "" || part.FormName() == "file":
			if dest == "" {
				writeError(w, http.StatusBadRequest, CodeInvalidRequest, "Missing destPath field (it must come before the file)")
				return
			}
			res, err := s.receive(part, dest, want, max)
			if err != nil {
				s.transferFailed(w, r, "push", dest, err)
				return
			}
			res.Duration = time.Since(start).Milliseconds()
			s.emit(TransferDone{Direction: "push", Path: res.Path, Bytes: res.Size, SHA256: res.Checksum, KeyName: keyName(r), Peer: r.RemoteAddr})
			writeJSON(w, http.StatusOK, res)
			return
		}
		part.Close()
	}
}

func boundary(r *http.Request) string {
	_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return params["boundary"]
}

func bodyErr(err error, max int64) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &transferErr{http.StatusRequestEntityTooLarge, CodeTooLarge, "too_large", fmt.Sprintf("File exceeds max size of %d bytes", max)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &transferErr{http.StatusBadRequest, CodeTransferFailed, "", fmt.Sprintf("the peer sent nothing for %s", transferIdle)}
	}
	return &transferErr{http.StatusBadRequest, CodeTransferFailed, "", "reading the upload: " + err.Error()}
}

// transferResult is Loopsy's TransferResult.
type transferResult struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Checksum string `json:"checksum"`
	Duration int64  `json:"duration"`
}

// receive streams part into a temporary file in dest's directory and
// renames it into place, all beneath dest's allowed root (see
// openBeneath): the directories of dest that do not exist are made there,
// and the directory is held open from the temporary file to the rename.
func (s *Server) receive(part io.Reader, dest, want string, max int64) (transferResult, error) {
	real, missing, err := resolve(dest)
	if err != nil {
		return transferResult{}, err
	}
	target := filepath.Join(append([]string{real}, missing...)...)
	root := s.paths.root(target)
	if root == "" || target == root { // a push lands beneath a root, never on one
		return transferResult{}, denied(dest)
	}
	if !under(real, root) { // the root does not exist yet: the operator's, made as named
		if err := os.MkdirAll(root, 0o755); err != nil {
			return transferResult{}, fmt.Errorf("making the allowed root of %s: %w", dest, err)
		}
	}
	rd, rel, err := openBeneath(root, target)
	if err != nil {
		return transferResult{}, fmt.Errorf("opening the allowed root of %s: %w", dest, err)
	}
	defer rd.Close()
	dir, name := rd, rel
	if d := filepath.Dir(rel); d != "." {
		if dir, err = rd.MkdirAll(d, 0o755); err != nil {
			if errors.Is(err, beneath.ErrRefused) {
				return transferResult{}, denied(dest)
			}
			return transferResult{}, fmt.Errorf("making the directory of %s: %w", dest, err)
		}
		defer dir.Close()
		name = filepath.Base(rel)
	}
	f, tmp, err := dir.CreateTemp(name, 0o600)
	if err != nil {
		if errors.Is(err, beneath.ErrRefused) {
			return transferResult{}, denied(dest)
		}
		return transferResult{}, fmt.Errorf("writing %s: %w", dest, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = dir.Remove(tmp)
		}
	}()
	h := sha256.New()
	fw := &fileWriter{f: f}
	n, err := io.CopyBuffer(io.MultiWriter(fw, h), io.LimitReader(part, max+1), make([]byte, transferBuf))
	if fw.err != nil {
		return transferResult{}, fmt.Errorf("writing %s: %w", dest, fw.err)
	}
	if err != nil {
		return transferResult{}, bodyErr(err, max)
	}
	if n > max {
		return transferResult{}, &transferErr{http.StatusRequestEntityTooLarge, CodeTooLarge, "too_large", fmt.Sprintf("File exceeds max size of %d bytes", max)}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want != "" && want != sum {
		return transferResult{}, &transferErr{http.StatusBadRequest, CodeChecksumMismatch, "checksum_mismatch",
			fmt.Sprintf("Checksum mismatch: the file's SHA-256 is %s, the request said %s", sum, want)}
	}
	if err := f.Sync(); err != nil {
		return transferResult{}, fmt.Errorf("writing %s: %w", dest, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return transferResult{}, fmt.Errorf("writing %s: %w", dest, err)
	}
	if err := f.Close(); err != nil {
		return transferResult{}, fmt.Errorf("writing %s: %w", dest, err)
	}
	if err := dir.Rename(tmp, name); err != nil {
		return transferResult{}, fmt.Errorf("putting the file in place at %s: %w", dest, err)
	}
	ok = true
	return transferResult{Path: target, Size: n, Checksum: sum}, nil
}

// fileWriter keeps its write error apart from the upload's read errors.
type fileWriter struct {
	f   *os.File
	err error
}

func (fw *fileWriter) Write(p []byte) (int, error) {
	n, err := fw.f.Write(p)
	if err != nil {
		fw.err = err
	}
	return n, err
}

// pull is POST /transfer/pull {sourcePath}: the file, streamed.
func (s *Server) pull(w http.ResponseWriter, r *http.Request) {
	var b struct {
		SourcePath string `json:"sourcePath"`
	}
	if !decodeBody(w, r, &b) {
		return
	}
	if b.SourcePath == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "Missing sourcePath")
		return
	}
	real, d, rel, err := s.existing(b.SourcePath)
	if err != nil {
		s.transferFailed(w, r, "pull", b.SourcePath, err)
		return
	}
	defer d.Close()
	// Open refuses what is not a regular file, and a FIFO without waiting
	// for a writer.
	f, err := d.Open(rel)
	if err != nil {
		s.transferFailed(w, r, "pull", b.SourcePath, openErr(d, rel, b.SourcePath, err, false))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.transferFailed(w, r, "pull", b.SourcePath, fmt.Errorf("reading %s: %w", real, err))
		return
	}
	if fi.Size() > s.cfg.Transfer.MaxFileSize {
		s.transferFailed(w, r, "pull", b.SourcePath, &transferErr{http.StatusRequestEntityTooLarge, CodeTooLarge, "too_large",
			fmt.Sprintf("File exceeds max size of %d bytes (it has %d)", s.cfg.Transfer.MaxFileSize, fi.Size())})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(real)}))
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	h.Set("X-Loopsy-File-Size", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	n, err := io.CopyBuffer(idleWriter{w, http.NewResponseController(w)}, io.LimitReader(f, fi.Size()), make([]byte, transferBuf))
	if err != nil {
		s.log.Warn().Err(err).Str("path", real).Int64("sent", n).Msg("http: a pull ended early")
		return
	}
	s.emit(TransferDone{Direction: "pull", Path: real, Bytes: n, KeyName: keyName(r), Peer: r.RemoteAddr})
}

// fileListEntry is Loopsy's FileListEntry.
type fileListEntry struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	Type     string `json:"type"` // file, directory, symlink
	Size     int64  `json:"size"`
	Modified int64  `json:"modified"` // Unix ms
}

// list is POST /transfer/list {path}: the directory's entries, sorted by
// name, at most maxListEntries (then truncated is true).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Path string `json:"path"`
	}
	if !decodeBody(w, r, &b) {
		return
	}
	if b.Path == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "Missing path")
		return
	}
	real, root, rel, err := s.existing(b.Path)
	if err != nil {
		s.transferFailed(w, r, "list", b.Path, err)
		return
	}
	defer root.Close()
	d := root
	if rel != "." {
		if d, err = root.Dir(rel); err != nil {
			s.transferFailed(w, r, "list", b.Path, openErr(root, rel, b.Path, err, true))
			return
		}
		defer d.Close()
	}
	ents, err := d.ReadDirN(".", maxListEntries+1)
	if err != nil {
		s.transferFailed(w, r, "list", b.Path, fmt.Errorf("listing %s: %w", real, err))
		return
	}
	truncated := len(ents) > maxListEntries
	if truncated {
		ents = ents[:maxListEntries]
	}
	files := make([]fileListEntry, 0, len(ents))
	for _, e := range ents {
		// The entry itself, through the directory listed: a link is
		// described as a link, never by what it points to.
		info, err := d.Lstat(e.Name())
		if err != nil {
			continue // gone meanwhile
		}
		typ := "file"
		switch {
		case info.Mode&fs.ModeSymlink != 0:
			typ = "symlink"
		case info.Mode.IsDir():
			typ = "directory"
		}
		files = append(files, fileListEntry{Name: e.Name(), Path: filepath.Join(b.Path, e.Name()), Type: typ, Size: info.Size, Modified: info.Mtime.UnixMilli()})
	}
	slices.SortFunc(files, func(a, b fileListEntry) int { return strings.Compare(a.Name, b.Name) })
	out := map[string]any{"files": files}
	if truncated {
		out["truncated"] = true
		out["message"] = fmt.Sprintf("the directory has more than %d entries; the first %d read are listed", maxListEntries, maxListEntries)
	}
	writeJSON(w, http.StatusOK, out)
}
