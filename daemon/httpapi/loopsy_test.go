package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/testio"
)

// resolve follows symlinks and .. on the real file system, component by
// component; what does not exist yet may not climb.
func TestResolve(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(root, "allowed")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{allowed, outside, filepath.Join(allowed, "sub"), filepath.Join(allowed, ".ssh")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(allowed, "sub"), filepath.Join(root, "via")); err != nil {
		t.Fatal(err)
	}
	ps := newPaths(TransferConfig{AllowedPaths: []string{allowed, filepath.Join(root, "via")},
		DeniedPaths: []string{filepath.Join(allowed, ".ssh")}}, "")
	for _, c := range []struct {
		raw     string
		real    string
		missing int
		ok      bool
	}{
		{allowed + "/sub/f", allowed + "/sub", 1, true},
		{allowed + "/sub/../f", allowed, 1, true},
		{allowed + "/../outside/f", outside, 1, false},
		{allowed + "/escape/f", outside, 1, false},                     // a symlink out
		{allowed + "/escape/../allowed/f", root + "/allowed", 1, true}, // .. after a link is the target's parent
		{root + "/via/f", allowed + "/sub", 1, true},                   // a symlinked root
		{allowed + "/.ssh/id", allowed + "/.ssh", 1, false},            // denied inside allowed
		{allowed + "/new/dir/f", allowed, 3, true},
		{allowed + "//./sub/./f", allowed + "/sub", 1, true},
	} {
		real, missing, err := resolve(c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.raw, err)
		}
		if real != c.real || len(missing) != c.missing {
			t.Errorf("%s: real %s missing %v, want %s and %d", c.raw, real, missing, c.real, c.missing)
		}
		if got := ps.ok(filepath.Join(append([]string{real}, missing...)...)); got != c.ok {
			t.Errorf("%s: allowed %v, want %v", c.raw, got, c.ok)
		}
	}
	for _, bad := range []string{"rel/path", allowed + "/nope/../../outside/f", allowed + "/a\x00b"} {
		if _, _, err := resolve(bad); err == nil {
			t.Errorf("%q resolved", bad)
		}
	}
	if newPaths(TransferConfig{}, "").ok(allowed + "/sub") {
		t.Error("nothing is allowed until configured")
	}
	home := t.TempDir()
	if newPaths(TransferConfig{AllowedPaths: []string{"/"}}, home).ok(filepath.Join(home, "http.key")) {
		t.Error("orchestrd's own home is allowed")
	}
}

func TestCategory(t *testing.T) {
	for path, want := range map[string]string{"/api/v1/execute": "exec", "/api/v1/execute/stream": "exec", "/api/v1/execute/j-1": "exec",
		"/api/v1/transfer/push": "transfer", "/api/v1/context/a": "context", "/api/v1/context": "context", "/api/v1/health": "",
		"/api/v1/peers": "", "/api/v1/executes": "", "/other": ""} {
		if got := category(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// A bucket holds a minute's worth; past it a refusal says how long to
// wait; other keys and categories are untouched; an event at most once a
// second, counting the refusals between.
func TestLimiter(t *testing.T) {
	l := newLimiter(RateLimits{Exec: 3, Transfer: 0, Context: 60})
	now := time.Unix(1000, 0)
	for i := range 3 {
		if w, _, _ := l.allow("k", "exec", now); w != 0 {
			t.Fatalf("request %d refused", i)
		}
	}
	w, report, _ := l.allow("k", "exec", now)
	if w <= 0 || w > 20*time.Second || !report {
		t.Fatalf("4th: wait %v report %v", w, report)
	}
	if _, report, _ := l.allow("k", "exec", now.Add(100*time.Millisecond)); report {
		t.Fatal("a second event within a second")
	}
	if w, _, _ := l.allow("other", "exec", now); w != 0 {
		t.Fatal("another key was limited")
	}
	if w, _, _ := l.allow("k", "context", now); w != 0 {
		t.Fatal("another category was limited")
	}
	for range 100 {
		if w, _, _ := l.allow("k", "transfer", now); w != 0 {
			t.Fatal("a category set to 0 was limited")
		}
	}
	if w, _, _ := l.allow("k", "exec", now.Add(20*time.Second)); w != 0 {
		t.Fatal("no token after 20 s at 3 a minute")
	}
	_, report, suppressed := l.allow("k", "exec", now.Add(21*time.Second))
	if !report || suppressed != 1 {
		t.Fatalf("report %v suppressed %d, want true 1", report, suppressed)
	}
}

// pushServer is a Server enough for push: the transfer paths and limits.
func pushServer(dir string, max int64) *Server {
	cfg := DefaultConfig()
	cfg.Transfer = TransferConfig{AllowedPaths: []string{dir}, MaxFileSize: max}
	return &Server{cfg: cfg, paths: newPaths(cfg.Transfer, ""), log: zerolog.Nop()}
}

func multipartBody(fields [][2]string, file []byte) (*bytes.Buffer, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, f := range fields {
		mw.WriteField(f[0], f[1])
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file", "f.bin")
		fw.Write(file)
	}
	mw.Close()
	return &b, mw.FormDataContentType()
}

func doPush(s *Server, body *bytes.Buffer, ctype string, hdr map[string]string) (*httptest.ResponseRecorder, map[string]any) {
	req := httptest.NewRequest("POST", "/api/v1/transfer/push", body)
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.push(rec, req)
	var m map[string]any
	json.Unmarshal(rec.Body.Bytes(), &m)
	return rec, m
}

func errCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// A push lands whole or not at all: too large, a bad checksum, a path
// outside, a missing destPath leave no file and no temporary.
func TestPush(t *testing.T) {
	dir := t.TempDir()
	s := pushServer(dir, 16)
	dest := filepath.Join(dir, "a", "b.txt")
	body, ct := multipartBody([][2]string{{"destPath", dest}}, []byte("hello"))
	rec, m := doPush(s, body, ct, nil)
	if rec.Code != 200 || m["size"] != float64(5) || m["checksum"] != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Fatalf("push: %d %s", rec.Code, rec.Body)
	}
	if b, _ := os.ReadFile(dest); string(b) != "hello" {
		t.Fatalf("the file holds %q", b)
	}
	for _, c := range []struct {
		name   string
		fields [][2]string
		file   []byte
		hdr    map[string]string
		status int
		code   float64
	}{
		{"too large", [][2]string{{"destPath", dir + "/big"}}, bytes.Repeat([]byte("x"), 17), nil, 413, CodeTooLarge},
		{"checksum field", [][2]string{{"destPath", dir + "/sum"}, {"checksum", strings.Repeat("0", 64)}}, []byte("x"), nil, 400, CodeChecksumMismatch},
		{"checksum header", [][2]string{{"destPath", dir + "/sum"}}, []byte("x"), map[string]string{"X-Loopsy-Checksum": "sha256:" + strings.Repeat("a", 64)}, 400, CodeChecksumMismatch},
		{"bad checksum", [][2]string{{"destPath", dir + "/sum"}, {"checksum", "xyz"}}, []byte("x"), nil, 400, CodeInvalidRequest},
		{"outside", [][2]string{{"destPath", "/tmp/orchestrd-push-test"}}, []byte("x"), nil, 403, CodePathDenied},
		{"climbing", [][2]string{{"destPath", dir + "/../x"}}, []byte("x"), nil, 403, CodePathDenied},
		{"no dest", nil, []byte("x"), nil, 400, CodeInvalidRequest},
		{"no file", [][2]string{{"destPath", dir + "/nofile"}}, nil, nil, 400, CodeTransferFailed},
	} {
		body, ct := multipartBody(c.fields, c.file)
		rec, m := doPush(s, body, ct, c.hdr)
		if rec.Code != c.status || errCode(m) != c.code {
			t.Errorf("%s: %d %s, want %d code %v", c.name, rec.Code, rec.Body, c.status, c.code)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "a" {
		t.Fatalf("left in the directory: %v", ents)
	}
	if _, err := os.Stat("/tmp/orchestrd-push-test"); err == nil {
		t.Fatal("a denied push wrote its file")
	}
	rec, m = doPush(s, bytes.NewBufferString("{}"), "application/json", nil)
	if rec.Code != 400 || errCode(m) != CodeInvalidRequest {
		t.Fatalf("a JSON push: %d %s", rec.Code, rec.Body)
	}
}

// transferCall calls a transfer handler of s with a JSON body.
func transferCall(h func(http.ResponseWriter, *http.Request), body string) (*httptest.ResponseRecorder, map[string]any) {
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("POST", "/api/v1/transfer/x", strings.NewReader(body)))
	var m map[string]any
	json.Unmarshal(rec.Body.Bytes(), &m)
	return rec, m
}

// Transfers open what they checked beneath its allowed root without
// following a link: a hard link to a file outside is denied, a FIFO is
// not waited on, a listed link is described itself, never its target; a
// root that is a file can be pulled but not pushed over; a push into a
// root not made yet makes it.
func TestTransferBeneath(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allowed, outside := filepath.Join(base, "allowed"), filepath.Join(base, "outside")
	fileRoot, laterRoot := filepath.Join(base, "single.txt"), filepath.Join(base, "later", "inbox")
	for _, d := range []string{filepath.Join(allowed, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{filepath.Join(outside, "secret"): "SECRET", filepath.Join(allowed, "sub", "f"): "inside", fileRoot: "single"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(outside, "secret"), filepath.Join(allowed, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(allowed, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for l, target := range map[string]string{filepath.Join(allowed, "sub", "out"): filepath.Join(outside, "secret"), filepath.Join(allowed, "in"): filepath.Join(allowed, "sub", "f")} {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}
	s := pushServer(allowed, 1<<20)
	s.paths = newPaths(TransferConfig{AllowedPaths: []string{allowed, fileRoot, laterRoot}}, "")

	pull := func(p string) (*httptest.ResponseRecorder, map[string]any) {
		return transferCall(s.pull, `{"sourcePath":"`+p+`"}`)
	}
	for p, want := range map[string]string{filepath.Join(allowed, "sub", "f"): "inside", filepath.Join(allowed, "in"): "inside", fileRoot: "single"} {
		if rec, _ := pull(p); rec.Code != 200 || rec.Body.String() != want {
			t.Errorf("pull %s: %d %s, want %q", p, rec.Code, rec.Body, want)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range []struct {
			path   string
			status int
			code   float64
		}{
			{filepath.Join(allowed, "hard"), 403, CodePathDenied},
			{filepath.Join(allowed, "sub", "out"), 403, CodePathDenied}, // resolved: outside
			{filepath.Join(allowed, "fifo"), 404, CodeFileNotFound},
			{filepath.Join(allowed, "sub"), 404, CodeFileNotFound},
			{allowed, 404, CodeFileNotFound},
		} {
			if rec, m := pull(c.path); rec.Code != c.status || errCode(m) != c.code {
				t.Errorf("pull %s: %d %s, want %d code %v", c.path, rec.Code, rec.Body, c.status, c.code)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		if w, err := os.OpenFile(filepath.Join(allowed, "fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close() // lets a pull waiting on the FIFO go
		}
		<-done
		t.Fatal("a pull waited on a FIFO")
	}

	rec, m := transferCall(s.list, `{"path":"`+filepath.Join(allowed, "sub")+`"}`)
	files, _ := m["files"].([]any)
	if rec.Code != 200 || len(files) != 2 {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	for _, f := range files {
		e := f.(map[string]any)
		want := map[string]any{"f": "file", "out": "symlink"}[e["name"].(string)]
		size := map[string]any{"f": float64(6), "out": float64(len(filepath.Join(outside, "secret")))}[e["name"].(string)]
		if e["type"] != want || e["size"] != size {
			t.Errorf("listed %v, want type %v and size %v (a link's own)", e, want, size)
		}
	}
	if rec, m := transferCall(s.list, `{"path":"`+filepath.Join(allowed, "sub", "f")+`"}`); rec.Code != 400 || errCode(m) != CodeTransferFailed {
		t.Errorf("list of a file: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := transferCall(s.list, `{"path":"`+allowed+`"}`); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"name":"fifo"`) {
		t.Errorf("list of the root: %d %s", rec.Code, rec.Body)
	}

	pushTo := func(dest string) (*httptest.ResponseRecorder, map[string]any) {
		body, ct := multipartBody([][2]string{{"destPath", dest}}, []byte("pushed"))
		return doPush(s, body, ct, nil)
	}
	if rec, m := pushTo(fileRoot); rec.Code != 403 || errCode(m) != CodePathDenied {
		t.Errorf("a push onto a root: %d %s", rec.Code, rec.Body)
	}
	if b, _ := os.ReadFile(fileRoot); string(b) != "single" {
		t.Errorf("the root that is a file holds %q", b)
	}
	if rec, _ := pushTo(filepath.Join(laterRoot, "a", "b.txt")); rec.Code != 200 {
		t.Errorf("a push into a root not made yet: %d %s", rec.Code, rec.Body)
	}
	if b, _ := os.ReadFile(filepath.Join(laterRoot, "a", "b.txt")); string(b) != "pushed" {
		t.Errorf("the push into a root not made yet holds %q", b)
	}
	if rec, _ := pushTo(filepath.Join(allowed, "hard")); rec.Code != 200 {
		t.Errorf("a push over a hard link: %d %s", rec.Code, rec.Body)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Errorf("a push over a hard link wrote the file outside: %q", b)
	}
}

// A goroutine swaps a directory under the allowed root with a link to
// one outside while pulls, lists and pushes (each into directories not
// made yet) go through it: none reads, lists, writes or makes a
// directory outside.
func TestTransferLinkRace(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allowed, outside := filepath.Join(base, "allowed"), filepath.Join(base, "outside")
	flip, flop := filepath.Join(allowed, "flip"), filepath.Join(allowed, "flop")
	for _, d := range []string{flip, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{filepath.Join(outside, "f"): "SECRET", filepath.Join(outside, "only-outside"): "SECRET", filepath.Join(flip, "f"): "inside"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, flop); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, flip, unix.AT_FDCWD, flop, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("RENAME_EXCHANGE: %v", err)
	}
	s := pushServer(allowed, 1<<20)
	halt := testio.Hammer(1, func() bool {
		_ = unix.Renameat2(unix.AT_FDCWD, flip, unix.AT_FDCWD, flop, unix.RENAME_EXCHANGE)
		return true
	})
	defer halt()
	inside, escapes := 0, 0
	var odd []string
	for i := 0; i < 1000 || inside == 0; i++ {
		if i == 20000 {
			t.Fatal("no pull read the file inside")
		}
		dir := []string{flip, flop}[i%2]
		// 404: resolving met the swap (a link read as it became a directory).
		rec, _ := transferCall(s.pull, `{"sourcePath":"`+filepath.Join(dir, "f")+`"}`)
		switch {
		case strings.Contains(rec.Body.String(), "SECRET"):
			escapes++
		case rec.Code == 200:
			inside++
		case rec.Code != 403 && rec.Code != 404:
			odd = append(odd, fmt.Sprintf("pull: %d %s", rec.Code, rec.Body))
		}
		if rec, _ := transferCall(s.list, `{"path":"`+dir+`"}`); strings.Contains(rec.Body.String(), "only-outside") {
			escapes++
		} else if rec.Code != 200 && rec.Code != 403 && rec.Code != 404 {
			odd = append(odd, fmt.Sprintf("list: %d %s", rec.Code, rec.Body))
		}
		if i%8 == 0 {
			body, ct := multipartBody([][2]string{{"destPath", filepath.Join(dir, fmt.Sprintf("d-%d", i), "x")}}, []byte("pushed"))
			if rec, _ := doPush(s, body, ct, nil); rec.Code != 200 && rec.Code != 403 && rec.Code != 404 {
				odd = append(odd, fmt.Sprintf("push: %d %s", rec.Code, rec.Body))
			}
		}
	}
	halt()
	if ents, _ := os.ReadDir(outside); len(ents) != 2 || escapes > 0 {
		t.Errorf("%d pulls or lists reached outside; outside holds %d entries, not 2", escapes, len(ents))
	}
	if len(odd) > 0 {
		t.Errorf("%d answers neither inside nor refused, the first: %s", len(odd), odd[0])
	}
	t.Logf("%d pulls read the file inside", inside)
}

// FuzzPush: any multipart body either lands one file under the allowed
// directory or is refused with Loopsy's error; never a panic, never a
// file elsewhere, never a temporary left behind.
func FuzzPush(f *testing.F) {
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"destPath\"\r\n\r\nDIR/x\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\nhello\r\n--B--\r\n"))
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\nhello\r\n--B--\r\n"))
	f.Add([]byte("--B\r\n\r\n--B--"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, body []byte) {
		dir := t.TempDir()
		s := pushServer(dir, 64)
		body = bytes.ReplaceAll(body, []byte("DIR"), []byte(dir))
		rec, m := doPush(s, bytes.NewBuffer(body), "multipart/form-data; boundary=B", nil)
		if rec.Code != 200 && errCode(m) == 0 {
			t.Fatalf("%d without a Loopsy error: %s", rec.Code, rec.Body)
		}
		err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && strings.Contains(fi.Name(), ".tmp-") {
				return fmt.Errorf("a temporary is left: %s", p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// The audit log rotates past max_bytes, keeps keep files, and every line
// is whole JSON; close writes what was queued.
func TestAuditRotates(t *testing.T) {
	home := t.TempDir()
	a := openAudit(home, AuditConfig{MaxBytes: 4096, Keep: 2}, zerolog.Nop())
	for i := range 300 {
		a.add(auditLine{Time: "2026-11-25T00:00:00Z", Peer: "127.0.0.1:1", KeyName: "self", Method: "GET",
			Path: fmt.Sprintf("/api/v1/context/k%d", i), Status: 200, Duration: 1})
	}
	a.close()
	a.add(auditLine{Path: "after close"}) // dropped quietly, no panic
	path := filepath.Join(home, AuditFile)
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Fatal("more rotated files than keep")
	}
	last := ""
	for _, p := range []string{path + ".2", path + ".1", path} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4096 {
			t.Fatalf("%s has %d bytes", p, len(b))
		}
		fi, _ := os.Stat(p)
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v", p, fi.Mode().Perm())
		}
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: line %q: %v", p, l, err)
			}
			last, _ = m["path"].(string)
		}
	}
	if last != "/api/v1/context/k299" {
		t.Fatalf("the newest line is %q", last)
	}
}

func TestSplitPeerAddr(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.1": "10.0.0.1 19532", "10.0.0.1:80": "10.0.0.1 80", "box.local": "box.local 19532",
		"[::1]:9": "::1 9", "::1": "", "a:0": "", "a:70000": "", "": "", "a b": "", ":80": ""} {
		h, p, err := SplitPeerAddr(in)
		got := ""
		if err == nil {
			got = fmt.Sprintf("%s %d", h, p)
		}
		if got != want {
			t.Errorf("%q: %q (%v), want %q", in, got, err, want)
		}
	}
}

// FuzzBodies: a transfer's checksum decodes and checks without a panic;
// what passes is a SHA-256 in hex. (The bodies of the context and the
// peers are the loopsy domain's: its FuzzBodies.)
func FuzzBodies(f *testing.F) {
	for _, s := range []string{"", "sha256:ab", strings.Repeat("a", 64), "sha256:" + strings.Repeat("F", 64), `{"value":"v"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := wantChecksum(string(b)); err == nil && v != "" && len(v) != 64 {
			t.Fatalf("checksum %q passed as %q", b, v)
		}
	})
}

// A refusal of Loopsy's domain is answered with its code and the status
// Loopsy gives it (the domain says the code, the front-end the status).
func TestLoopsyStatus(t *testing.T) {
	for code, want := range map[int]int{CodeContextNotFound: 404, CodePeerNotFound: 404, CodeContextTooLarge: 413,
		CodeContextMaxEntries: 400, CodePeerVersionMismatch: 400, CodeInvalidRequest: 400, CodeInternal: 500} {
		if got := loopsyStatus(code); got != want {
			t.Errorf("code %d: status %d, want %d", code, got, want)
		}
	}
}
