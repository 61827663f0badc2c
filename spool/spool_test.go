package spool

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/platform/beneath"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clankerDir is a new .clanker, opened as the daemon opens a repo's:
// beneath, the daemon's uid its only owner.
func clankerDir(t *testing.T) (string, *beneath.Dir) {
	dir := t.TempDir()
	d, err := beneath.OpenRoot(dir, beneath.Options{Owners: []int{os.Geteuid()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return dir, d
}

// takenFile is a taken file holding content, open for reading, and its
// size.
func takenFile(t testing.TB, dir, content string) (*os.File, int64) {
	path := filepath.Join(dir, DrainingName)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, int64(len(content))
}

// Take renames a spool with lines in it to the taken file's name, and
// leaves alone a spool that is absent, empty, or not a regular file
// (refused, found false).
func TestTake(t *testing.T) {
	dir, d := clankerDir(t)
	if found, err := Take(d); found || err != nil {
		t.Fatalf("no spool: found %v, err %v", found, err)
	}
	if err := os.WriteFile(filepath.Join(dir, Name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if found, err := Take(d); found || err != nil {
		t.Fatalf("empty spool: found %v, err %v", found, err)
	}
	if err := os.WriteFile(filepath.Join(dir, Name), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if found, err := Take(d); !found || err != nil {
		t.Fatalf("spool: found %v, err %v", found, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, DrainingName)); err != nil || string(b) != "a\n" {
		t.Fatalf("taken file %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, Name)); !os.IsNotExist(err) {
		t.Fatalf("the spool is still there: %v", err)
	}

	// A FIFO is refused without blocking; a link is refused, its target
	// untouched.
	if err := syscall.Mkfifo(filepath.Join(dir, Name), 0o644); err != nil {
		t.Fatal(err)
	}
	var re *beneath.RefusedError
	if found, err := Take(d); found || !errors.As(err, &re) {
		t.Fatalf("FIFO spool: found %v, err %v", found, err)
	}
	os.Remove(filepath.Join(dir, Name))
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, Name)); err != nil {
		t.Fatal(err)
	}
	if found, err := Take(d); found || !errors.As(err, &re) {
		t.Fatalf("linked spool: found %v, err %v", found, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "x\n" {
		t.Fatalf("the link's target became %q", b)
	}
}

// Read hands on the lines from an offset in order, skips blank ones,
// stops at max, decodes each, and says where it stopped and whether the
// file is read to its end.
func TestRead(t *testing.T) {
	const (
		l1 = `{"type":"hello","payload":{"podId":"p1"}}`
		l2 = `not json`
		l3 = `{"ts":"2026-01-26T10:00:00.000Z","type":"task_note","payload":{}}`
	)
	content := l1 + "\n\n  \n" + l2 + "\r\n" + l3
	f, size := takenFile(t, t.TempDir(), content)

	var got []Line
	each := func(l Line) { got = append(got, l) }
	next, lines, eof, err := Read(f, 0, size, 2, each)
	if err != nil || lines != 2 || eof || next != int64(strings.Index(content, l3)) {
		t.Fatalf("first batch: next %d, lines %d, eof %v, err %v", next, lines, eof, err)
	}
	if !got[0].First || got[0].Err != nil || got[0].Entry.Type != "hello" || got[0].Size != len(l1) {
		t.Fatalf("line 1: %+v", got[0])
	}
	if got[1].First || got[1].Err == nil || string(got[1].Text) != l2 || got[1].Size != len(l2) {
		t.Fatalf("line 2: %+v", got[1])
	}
	got = nil
	next, lines, eof, err = Read(f, next, size, 2, each)
	if err != nil || lines != 1 || !eof || next != size {
		t.Fatalf("second batch: next %d, lines %d, eof %v, err %v", next, lines, eof, err)
	}
	if got[0].Err != nil || got[0].Entry.Type != "task_note" || got[0].Entry.TS != "2026-01-26T10:00:00.000Z" {
		t.Fatalf("line 3: %+v", got[0])
	}
	// Read to its end: nothing more, and it says so.
	if next, lines, eof, err = Read(f, next, size, 2, each); err != nil || lines != 0 || !eof || next != size {
		t.Fatalf("at the end: next %d, lines %d, eof %v, err %v", next, lines, eof, err)
	}
}

// Only the first line of a file that is not JSON may be cut by its
// writers' trimming.
func TestMayBeCut(t *testing.T) {
	for _, c := range []struct {
		l    Line
		want bool
	}{
		{Line{Text: []byte(`pe":"hello"}`), First: true}, true},
		{Line{Text: []byte(`pe":"hello"}`)}, false},
		{Line{Text: []byte(` {"type":"x"} `), First: true}, false},
	} {
		if got := c.l.MayBeCut(); got != c.want {
			t.Errorf("%q first %v: MayBeCut %v, want %v", c.l.Text, c.l.First, got, c.want)
		}
	}
}

// A dead-letter entry is one line of JSON in clanker's member order, the
// type left out when there is none, the line kept to its first 64 KiB,
// nothing escaped for HTML.
func TestDeadEntry(t *testing.T) {
	got := string(DeadEntry("2026-01-01T00:00:00.000Z", "Task <t1> not found", "", []byte(`{"a":"&"}`)))
	want := `{"ts":"2026-01-01T00:00:00.000Z","error":"Task <t1> not found","line":"{\"a\":\"&\"}"}` + "\n"
	if got != want {
		t.Fatalf("entry\n%s\nwant\n%s", got, want)
	}
	long := strings.Repeat("x", maxDeadLine+100)
	var e struct{ TS, Error, Type, Line string }
	if err := json.Unmarshal(DeadEntry("ts", "too long", "task_status", []byte(long)), &e); err != nil {
		t.Fatal(err)
	}
	if e.Type != "task_status" || e.Line != long[:maxDeadLine]+"…" {
		t.Fatalf("type %q, line of %d bytes", e.Type, len(e.Line))
	}
}

// Sizes counts the regular files only, and what is left of the taken
// file after the drain's position.
func TestSizes(t *testing.T) {
	dir, d := clankerDir(t)
	os.WriteFile(filepath.Join(dir, Name), []byte("12345"), 0o644)
	os.WriteFile(filepath.Join(dir, DrainingName), []byte("1234567890"), 0o644)
	if err := os.Symlink(filepath.Join(dir, Name), filepath.Join(dir, DeadName)); err != nil {
		t.Fatal(err)
	}
	p, dr, dead := Sizes(d, &Pos{Offset: 4})
	if p != 5 || dr != 6 || dead != 0 {
		t.Fatalf("sizes %d %d %d, want 5 6 0", p, dr, dead)
	}
	if _, dr, _ = Sizes(d, nil); dr != 10 {
		t.Fatalf("draining %d without a position, want 10", dr)
	}
}

// Writing: a taken file a process holds open is being written, until the
// grace is over; one nobody holds is not.
func TestWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), DrainingName)
	if err := os.WriteFile(path, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// This process does not count (the daemon reads the file itself).
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := time.Now()
	if Writing(path, now, now) {
		t.Fatal("a file only the daemon holds open is being written")
	}
	// A child holds it open.
	var attr os.ProcAttr
	attr.Files = []*os.File{nil, nil, nil, f}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	proc, err := os.StartProcess(sleep, []string{"sleep", "60"}, &attr)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Wait()
	defer proc.Kill()
	// The child has the file from its start (StartProcess returns once it
	// runs sleep).
	if !Writing(path, now, now) {
		t.Fatal("a file a child holds open is not seen as written")
	}
	if Writing(path, now, now.Add(WritersGrace)) {
		t.Fatal("still waiting for the writers past the grace")
	}
	proc.Kill()
	proc.Wait()
	if Writing(path, now, now) {
		t.Fatal("a file whose writer is gone is still being written")
	}
}

// FuzzRead: any file is read to its end in batches, each line handed on
// once, never a panic; a line handed on without an error holds a request
// with a type.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		"",
		"{\"type\":\"hello\",\"payload\":{}}\n",
		"a\r\n\n{\"type\":\"x\"}\nlast",
		"\n\n\n",
		strings.Repeat("y", 300) + "\n{\"type\":1}\n",
	} {
		f.Add([]byte(seed), 2)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte, max int) {
		if max < 1 || max > 50 {
			max = 1 + (max%50+50)%50
		}
		file, size := takenFile(t, dir, string(content))
		var pos int64
		for rounds := 0; ; rounds++ {
			if rounds > len(content)+1 {
				t.Fatalf("not at the end after %d rounds (at %d of %d)", rounds, pos, size)
			}
			next, lines, eof, err := Read(file, pos, size, max, func(l Line) {
				if l.Err == nil && l.Entry.Type == "" {
					t.Fatalf("line %q handed on without a type or an error", l.Text)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if lines > max || next < pos || (next == pos && !eof) {
				t.Fatalf("from %d: next %d, lines %d (max %d), eof %v", pos, next, lines, max, eof)
			}
			pos = next
			if eof {
				break
			}
		}
		if pos != size {
			t.Fatalf("ended at %d of %d", pos, size)
		}
	})
}
