package spool

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/wire"
)

// A record keeps its members' order and the ones it does not know, and
// writes a file as JSON.stringify(task, null, 2) does.
func TestRecordKeepsOrder(t *testing.T) {
	r, err := parseRecord([]byte(`{"id":"t1","zeta":{"b":1,"a":[1,2]},"status":"queued","id":"t1b"}`))
	if err != nil {
		t.Fatal(err)
	}
	r.setString("prompt", "<p> & \"q\"")
	r.del("zeta")
	want := "{\n  \"id\": \"t1b\",\n  \"status\": \"queued\",\n  \"prompt\": \"<p> & \\\"q\\\"\"\n}"
	if got := string(r.file()); got != want {
		t.Fatalf("file:\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{`[]`, `{"a":1} {}`, `{"a":`, ``} {
		if _, err := parseRecord([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestValidTask(t *testing.T) {
	for _, tc := range []struct{ task, err string }{
		{`{"id":"t1","prompt":"p","status":"queued","ownerDirs":["src"],"usage":{"tokens":1,"cost":0}}`, ""},
		{`{"prompt":"p","status":"queued"}`, "missing id"},
		{`{"id":"t1","status":"queued"}`, "missing prompt"},
		{`{"id":"t1","prompt":"p","status":"later"}`, `invalid status "later"`},
		{`{"id":"a/b","prompt":"p","status":"done"}`, "invalid id"},
		{`{"id":"t1","prompt":"p","status":"done","ownerFiles":[""]}`, "invalid ownerFiles"},
		{`{"id":"t1","prompt":"p","status":"done","ownerDirs":"src"}`, "invalid ownerDirs"},
		{`{"id":"t1","prompt":"p","status":"done","usage":{"tokens":"1","cost":0}}`, "invalid usage.tokens"},
		{`{"id":"t1","prompt":"p","status":"done","resumeSlaveId":3}`, "invalid resumeSlaveId"},
	} {
		r, err := parseRecord([]byte(tc.task))
		if err != nil {
			t.Fatal(err)
		}
		err = validTask(r)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.task, err, tc.err)
		}
	}
}

// An outbox replayed after a kill appends only the entries its files do
// not already end with.
func TestRecoverOutbox(t *testing.T) {
	dir := t.TempDir()
	log, dead := filepath.Join(dir, "events.log"), filepath.Join(dir, "dead.ndjson")
	os.WriteFile(log, []byte("old\na\nb\n"), 0o644)
	out := []state.ClankerLine{
		{Seq: 1, File: log, Data: "a\n"}, {Seq: 2, File: log, Data: "b\n"}, {Seq: 3, File: dead, Data: "x\n"},
		{Seq: 4, File: log, Data: "c\n"}, {Seq: 5, File: filepath.Join(dir, "h.md"), Replace: true, Data: "h"},
	}
	var seqs []int64
	for _, l := range recoverOutbox(out) {
		seqs = append(seqs, l.Seq)
	}
	if len(seqs) != 3 || seqs[0] != 3 || seqs[1] != 4 || seqs[2] != 5 {
		t.Fatalf("kept %v, want [3 4 5]", seqs)
	}
	// Appending to a file whose last line lost its newline keeps lines.
	os.WriteFile(dead, []byte("cut"), 0o644)
	if err := appendLines(dead, []byte("x\n"), false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dead); string(b) != "cut\nx\n" {
		t.Fatalf("dead file %q", b)
	}
}

// A spool line over the limit is consumed whole and reported; the lines
// after it are read as they are.
func TestReadSpoolLine(t *testing.T) {
	long := strings.Repeat("x", wire.MaxClankerLine+10)
	br := bufio.NewReaderSize(strings.NewReader("a\r\n"+long+"\nb\nlast"), 4096)
	var got []string
	var sizes []int
	for {
		l, n, size, err := readSpoolLine(br)
		if n == 0 {
			break
		}
		sizes = append(sizes, size)
		if err != nil {
			got = append(got, "ERR:"+err.Error())
			continue
		}
		got = append(got, string(l))
	}
	want := []string{"a", "ERR:a spool line over 1048576 bytes", "b", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q", got)
	}
	if fmt.Sprint(sizes) != fmt.Sprint([]int{1, len(long), 1, 4}) {
		t.Fatalf("sizes %v, want each line's length without its end", sizes)
	}
}
