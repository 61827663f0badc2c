package executors

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"
)

// Whatever an executor wrote to stderr, what is shown of it is at most
// tailLines lines of at most tailLine bytes, valid UTF-8 without a
// control character, and the last line it wrote.
func FuzzStderrLines(f *testing.F) {
	f.Add([]byte("starting\nno model: \x1b]0;title\x07\n"))
	f.Add([]byte(strings.Repeat("x", 5000)))
	f.Add([]byte("\xff\xfe\n\n\na\nb\nc\nd\ne\nf\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tail := &stderrTail{}
		tail.last = b
		if len(tail.last) > tailBytes {
			tail.last = tail.last[len(tail.last)-tailBytes:]
		}
		ls := tail.lines()
		if len(ls) > tailLines {
			t.Fatalf("%d lines", len(ls))
		}
		for _, l := range ls {
			if !utf8.ValidString(l) || len(l) > 4*tailLine {
				t.Fatalf("line %q", l)
			}
			for _, r := range l {
				if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
					t.Fatalf("a control character in %q", l)
				}
			}
		}
	})
}

func TestStderrLines(t *testing.T) {
	tail := &stderrTail{last: []byte("one\ntwo\nthree\nfour\nfive\nsix\nno model: \x1b[31mred\x1b]0;t\x07\n")}
	got := strings.Join(tail.lines(), "|")
	if want := "three|four|five|six|no model: ?[31mred?]0;t?"; got != want {
		t.Fatalf("lines: %q, want %q", got, want)
	}
}

// What an executor wrote to stderr just before it exited is in its tail
// once the tail has settled: the reader may have taken the last chunk
// out of the pipe and not yet kept it (the old settle saw an empty pipe
// and went on without it: "exited before it connected" without its
// words, loaded CI). Real processes, each writing a line and exiting.
func TestStderrSettleKeepsTheLastWords(t *testing.T) {
	for i := range 300 {
		tail, err := newStderrTail(nil)
		if err != nil {
			t.Fatal(err)
		}
		word := fmt.Sprintf("MARK-%d", i)
		cmd := exec.Command("/bin/sh", "-c", "echo \"no agent here: $0\" >&2; exit 3", word)
		cmd.Stderr = tail.w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tail.started()
		_ = cmd.Wait()
		tail.settle()
		if ls := tail.lines(); len(ls) != 1 || ls[0] != "no agent here: "+word {
			t.Fatalf("run %d: the tail says %q", i, ls)
		}
	}
}
