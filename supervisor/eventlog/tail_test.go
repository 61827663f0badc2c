package eventlog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tail gives the last n matching lines, oldest first, across the current
// file and the rotated ones, the same lines Read gives last; a torn last
// line is skipped.
func TestTailMatchesRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	write := func(name string, from, to int) {
		var b strings.Builder
		for i := from; i < to; i++ {
			kind := "job.queued"
			if i%3 == 0 {
				kind = "job.finished"
			}
			fmt.Fprintf(&b, `{"ts":"2026-11-26T10:00:00.%06dZ","seq":%d,"kind":%q,"job_id":"j-%d","pad":%q}`+"\n", i, i, kind, i%7,
				strings.Repeat("x", i%300))
		}
		if err := os.WriteFile(name, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(path+".2", 1, 800)
	write(path+".1", 800, 1500)
	write(path, 1500, 3000)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"ts":"2026-11-26T10:00:01Z","seq":3001,"kind":"job.fin`) // torn
	f.Close()
	for _, q := range []Query{{}, {Kinds: []string{"job.finished"}}, {Job: "j-3"}, {Kinds: []string{"job.queued"}, Job: "j-5"}} {
		for _, n := range []int{1, 10, 500, 5000} {
			var all []Line
			if err := Read(context.Background(), path, q, func(l Line) error { all = append(all, l); return nil }); err != nil {
				t.Fatal(err)
			}
			got, more, err := Tail(context.Background(), path, q, n)
			if err != nil {
				t.Fatal(err)
			}
			want := all[max(0, len(all)-n):]
			if len(got) != len(want) || more != (len(all) > n) {
				t.Fatalf("%+v n=%d: %d lines (more %v), want %d (of %d)", q, n, len(got), more, len(want), len(all))
			}
			for i := range got {
				if got[i].Seq != want[i].Seq {
					t.Fatalf("%+v n=%d: line %d is seq %d, want %d", q, n, i, got[i].Seq, want[i].Seq)
				}
			}
		}
	}
	// Since stops the read: lines older than it are not even looked at.
	since, _ := time.Parse(time.RFC3339Nano, "2026-11-26T10:00:00.002900Z")
	got, more, err := Tail(context.Background(), path, Query{Since: since}, 5000)
	if err != nil || more || len(got) != 100 || got[0].Seq != 2900 {
		t.Fatalf("since: %d lines (more %v, err %v), first %v", len(got), more, err, got)
	}
	if got, more, err := Tail(context.Background(), filepath.Join(dir, "none"), Query{}, 5); err != nil || len(got) != 0 || more {
		t.Fatalf("no log: %v %v %v", got, more, err)
	}
}
