package beneath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tree makes root/{in/file, in/sub/deep, link -> outside, in/dirlink ->
// outside dir, in/hard (a hard link to outside/secret), in/fifo} and an
// outside directory holding a secret; it returns root and outside.
func tree(t testing.TB) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "in", "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "in", "file"), "inside")
	write(filepath.Join(root, "in", "sub", "deep"), "inside deep")
	write(filepath.Join(outside, "secret"), "SECRET")
	links := map[string]string{
		filepath.Join(root, "link"):          filepath.Join(outside, "secret"),
		filepath.Join(root, "in", "dirlink"): outside,
		filepath.Join(root, "in", "rel"):     "../../outside/secret",
		filepath.Join(root, "in", "dangle"):  filepath.Join(outside, "new"),
		filepath.Join(root, "in", "self"):    "file",
	}
	for l, target := range links {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(outside, "secret"), filepath.Join(root, "in", "hard")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "in", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func TestOpenRefusesWhatIsNotBeneath(t *testing.T) {
	root, outside := tree(t)
	d, err := OpenRoot(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		rel, want string // want: the content, or "refused: REASON" / "error"
	}{
		{"in/file", "inside"},
		{"in/sub/deep", "inside deep"},
		{"link", "refused: is a symbolic link"},
		{"in/dirlink/secret", "refused: is a symbolic link"},
		{"in/rel", "refused: is a symbolic link"},
		{"in/self", "refused: is a symbolic link"},
		{"in/hard", "refused: has 2 links"},
		{"in/fifo", "refused: is a FIFO"},
		{"in", "refused: is a directory"},
		{"../outside/secret", `refused: has a ".." component`},
		{"in/../link", `refused: has a ".." component`},
		{outside + "/secret", "refused: is absolute"},
		{"in//file", "refused: has an empty"},
		{"./in/file", "refused: has an empty"},
		{"", "refused: is empty"},
		{"in/nope", "error"},
		{"in/file/x", "refused: is a regular file"},
	} {
		t.Run(strings.ReplaceAll(tc.rel, "/", "_"), func(t *testing.T) {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() {
				defer close(done)
				b, err = d.ReadFile(tc.rel, 1<<20)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("reading %q blocked", tc.rel)
			}
			switch {
			case strings.HasPrefix(tc.want, "refused: "):
				var re *RefusedError
				if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || !strings.Contains(re.Reason, strings.TrimPrefix(tc.want, "refused: ")) {
					t.Fatalf("ReadFile(%q) = %q, %v; want a refusal %q", tc.rel, b, err, tc.want)
				}
			case tc.want == "error":
				if err == nil || errors.Is(err, ErrRefused) {
					t.Fatalf("ReadFile(%q) = %q, %v; want an I/O error", tc.rel, b, err)
				}
			default:
				if err != nil || string(b) != tc.want {
					t.Fatalf("ReadFile(%q) = %q, %v; want %q", tc.rel, b, err, tc.want)
				}
			}
		})
	}
	// Nothing was written through a link: creating or appending at a link
	// is refused and the target is unchanged.
	for _, rel := range []string{"link", "in/dangle", "in/dirlink/secret", "in/hard"} {
		f, err := d.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err == nil {
			f.Close()
			t.Fatalf("OpenFile(%q, create|append) succeeded", rel)
		}
	}
	// O_TRUNC too: a file refused is not truncated first.
	for _, rel := range []string{"link", "in/hard", "in/dirlink/secret"} {
		f, err := d.OpenFile(rel, os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			f.Close()
			t.Fatalf("OpenFile(%q, truncate) succeeded", rel)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Fatalf("a refused open truncated the file: %q", b)
	}
	if err := d.WriteFile("link", []byte("replaced"), 0o600, true); err != nil {
		t.Fatalf("WriteFile over a link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Fatalf("the link's target was written: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(root, "link")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("WriteFile did not replace the link itself: %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a dangling link's target was created: %v", err)
	}
	if _, err := d.MkdirAll("in/dirlink/x", 0o700); !errors.Is(err, ErrRefused) {
		t.Fatalf("MkdirAll through a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a directory was made through a link: %v", err)
	}
	if err := d.Remove("in/dirlink/secret"); !errors.Is(err, ErrRefused) {
		t.Fatalf("Remove through a link: %v", err)
	}
	if err := d.Rename("in/file", "in/dirlink/stolen"); !errors.Is(err, ErrRefused) {
		t.Fatalf("Rename through a link: %v", err)
	}
}

func TestOwners(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	root, _ := tree(t)
	if err := os.Chown(filepath.Join(root, "in", "sub"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "in", "file"), 4243, 4243); err != nil {
		t.Fatal(err)
	}
	d, err := OpenRoot(root, Options{Owners: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for rel, uid := range map[string]string{"in/file": "4243", "in/sub/deep": "4242"} {
		_, err := d.ReadFile(rel, 0)
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(re.Reason, "owned by uid "+uid) {
			t.Fatalf("ReadFile(%q): %v; want refused, owned by uid %s", rel, err, uid)
		}
	}
	if _, err := OpenRoot(filepath.Join(root, "in", "sub"), Options{Owners: []int{0}}); !errors.Is(err, ErrRefused) {
		t.Fatalf("OpenRoot of another uid's directory: %v", err)
	}
	any, err := OpenRoot(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer any.Close()
	if _, err := any.ReadFile("in/file", 0); err != nil {
		t.Fatalf("without Owners: %v", err)
	}
}

func TestWriteFileReadDirLstat(t *testing.T) {
	root := t.TempDir()
	d, err := OpenRoot(root, Options{Owners: []int{os.Getuid()}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sub, err := d.MkdirAll("a/b", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	if err := d.WriteFile("a/b/f", []byte("one"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("a/b/f", []byte("two"), 0o640, false); err != nil {
		t.Fatal(err)
	}
	info, err := d.Lstat("a/b/f")
	if err != nil || !info.IsRegular() || info.Size != 3 || info.Mode.Perm() != 0o640 {
		t.Fatalf("Lstat: %+v, %v", info, err)
	}
	ents, err := d.ReadDir("a/b")
	if err != nil || len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("ReadDir: %v, %v (no temporary file may be left)", ents, err)
	}
	if err := d.Rename("a/b/f", "a/g"); err != nil {
		t.Fatal(err)
	}
	if b, err := d.ReadFile("a/g", 0); err != nil || string(b) != "two" {
		t.Fatalf("after Rename: %q, %v", b, err)
	}
	if err := d.Remove("a/g"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Lstat("a/g"); !IsNotExist(err) {
		t.Fatalf("Lstat after Remove: %v", err)
	}
	if _, err := d.ReadFile("a/b", 0); !errors.Is(err, ErrRefused) {
		t.Fatalf("ReadFile of a directory: %v", err)
	}
	long := "a/" + strings.Repeat("n", 255) // the longest name a file may have
	if err := d.WriteFile(long, []byte("long"), 0o600, false); err != nil {
		t.Fatalf("WriteFile of a 255-byte name: %v", err)
	}
	if err := d.Remove(long); err != nil {
		t.Fatal(err)
	}
	f, err := d.OpenFile("a/log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("x\n")
	f.Close()
	if _, err := d.ReadFile("a/log", 1); err == nil || !strings.Contains(err.Error(), "larger than 1 bytes") {
		t.Fatalf("ReadFile over max: %v", err)
	}
	f, err = d.OpenFile("a/log", os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if info, err := d.Lstat("a/log"); err != nil || info.Size != 0 {
		t.Fatalf("O_TRUNC did not truncate: %+v, %v", info, err)
	}
}

// A goroutine swaps a directory for a link to another, over and over,
// while the test opens a file through it: every open gives the file
// inside, or a refusal, never the one outside.
func TestSwapRace(t *testing.T) {
	root, outside := tree(t)
	d, err := OpenRoot(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	realDir, parked := filepath.Join(root, "swap"), filepath.Join(root, "parked")
	if err := os.Mkdir(realDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(realDir, "secret"), []byte("inside"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmpLink := filepath.Join(root, "swaplink")
		for !stop.Load() {
			_ = os.Rename(realDir, parked)
			_ = os.Symlink(outside, tmpLink)
			_ = os.Rename(tmpLink, realDir)
			_ = os.Remove(realDir)
			_ = os.Rename(parked, realDir)
		}
	}()
	// At least 2000 reads, and on until both outcomes were seen: a
	// starved machine may refuse every one of the first 20000 (the
	// directory is real only between two renames), so past those the
	// reads go on while none was inside, for up to a minute.
	deadline := time.Now().Add(time.Minute)
	inside, refused := 0, 0
	for i := 0; i < 2000 || inside == 0 && (i < 20000 || time.Now().Before(deadline)) || refused == 0 && i < 20000; i++ {
		b, err := d.ReadFile("swap/secret", 0)
		switch {
		case err == nil && string(b) == "inside":
			inside++
		case err == nil:
			stop.Store(true)
			wg.Wait()
			t.Fatalf("read %q through a swapped link", b)
		default:
			refused++
		}
	}
	stop.Store(true)
	wg.Wait()
	if inside == 0 {
		t.Fatalf("never read the file inside (%d refused)", refused)
	}
	t.Logf("%d reads inside, %d refused or missing", inside, refused)
}

// Whatever path is asked for, what is read is a file of the tree reached
// without a link: "inside" or "inside deep".
func FuzzReadFile(f *testing.F) {
	for _, s := range []string{"in/file", "link", "in/dirlink/secret", "../outside/secret", "in/rel", "in/sub/deep",
		"/etc/passwd", "in/./file", "in/sub/../file", "in\x00/file", "in/hard", "in/fifo"} {
		f.Add(s)
	}
	root, _ := tree(f)
	d, err := OpenRoot(root, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	f.Fuzz(func(t *testing.T, rel string) {
		b, err := d.ReadFile(rel, 1<<20)
		if err != nil {
			return
		}
		if s := string(b); s != "inside" && s != "inside deep" {
			t.Fatalf("ReadFile(%q) read %q", rel, s)
		}
	})
}

// ReadDirN reads at most n entries, sorted; an empty directory is no
// error; a link on the way is refused.
func TestReadDirN(t *testing.T) {
	root, _ := tree(t)
	d, err := OpenRoot(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	many, err := d.MkdirAll("many", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer many.Close()
	for _, name := range []string{"e", "b", "d", "a", "c"} {
		if err := many.WriteFile(name, nil, 0o600, false); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ents []fs.DirEntry) string {
		var s []string
		for _, e := range ents {
			s = append(s, e.Name())
		}
		return strings.Join(s, ",")
	}
	ents, err := d.ReadDirN("many", 3)
	byName := func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) }
	if err != nil || len(ents) != 3 || !slices.IsSortedFunc(ents, byName) {
		t.Fatalf("ReadDirN(many, 3): %s, %v", names(ents), err)
	}
	for _, n := range []int{0, -1, 5, 100} {
		if ents, err := d.ReadDirN("many", n); err != nil || names(ents) != "a,b,c,d,e" {
			t.Fatalf("ReadDirN(many, %d): %s, %v", n, names(ents), err)
		}
	}
	if ents, err := many.ReadDirN(".", 2); err != nil || len(ents) != 2 {
		t.Fatalf(`ReadDirN(".", 2): %s, %v`, names(ents), err)
	}
	empty, err := d.MkdirAll("empty", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	empty.Close()
	if ents, err := d.ReadDirN("empty", 10); err != nil || len(ents) != 0 {
		t.Fatalf("ReadDirN(empty, 10): %s, %v", names(ents), err)
	}
	if _, err := d.ReadDirN("in/dirlink", 10); !errors.Is(err, ErrRefused) {
		t.Fatalf("ReadDirN through a link: %v", err)
	}
}
