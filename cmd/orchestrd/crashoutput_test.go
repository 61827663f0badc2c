package main

import (
	"bytes"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

const crashLanes = `
[lanes.work]
runners = 1
slots = 2
spares = 0
network = "host"
`

// steadyLines prints "line 0", "line 1", ... one every 20 ms, forever.
const steadyLines = `i=0; while :; do echo "line $i"; i=$((i+1)); sleep 0.02; done`

// streamedOutput reads what state.db holds of a running job's output, as
// it streams: its pieces joined, and the most bytes it was counted to have
// written.
func streamedOutput(t *testing.T, db *sql.DB, id string) ([]byte, int64) {
	t.Helper()
	rows, err := db.Query(`SELECT o.total, o.data FROM job_output o JOIN jobs j USING (seq) WHERE j.id = ? ORDER BY o.off`, id)
	if err != nil {
		return nil, 0 // not there yet (or no such table: the old code)
	}
	defer rows.Close()
	var out []byte
	var total int64
	for rows.Next() {
		var n int64
		var data []byte
		if err := rows.Scan(&n, &data); err != nil {
			t.Fatal(err)
		}
		out, total = append(out, data...), max(total, n)
	}
	return out, total
}

// A daemon killed with SIGKILL mid-job keeps what the job printed: the
// output is written to the store as it streams (within max_output_bytes),
// and the next daemon puts it in the record of the job it ends
// daemon_lost, where job.get, `logs ID` and `job ID` show it.
func TestKill9KeepsTheOutputSoFar(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	d := startDaemonAt(t, home, crashLanes)
	long := d.submit(api.JobSpec{Lane: "work", Command: steadyLines})
	capped := d.submit(api.JobSpec{Lane: "work", Command: steadyLines, MaxOutputBytes: 200})

	db, err := sql.Open("sqlite", "file:"+filepath.Join(home, "state.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// What the store has is what survives: wait until it has line 40 of
	// the one and a kilobyte counted of the other, then kill the daemon.
	eventually(t, 60*time.Second, "the jobs' output streamed into state.db", func() bool {
		out, _ := streamedOutput(t, db, long)
		_, total := streamedOutput(t, db, capped)
		return bytes.Contains(out, []byte("\nline 40\n")) && total >= 1000
	})
	db.Close()
	d.kill9()

	d2 := startDaemonAt(t, home, crashLanes)
	for _, id := range []string{long, capped} {
		if rec := d2.wait(id); rec.State != api.StateFailed || rec.Error != api.ErrDaemonLost {
			t.Fatalf("job %s ended %s (%s), want failed %s", id, rec.State, rec.Error, api.ErrDaemonLost)
		}
	}
	var got struct{ Job api.JobRecord }
	d2.mustCall("job.get", map[string]any{"id": long}, &got)
	out := got.Job.Output
	lines := strings.Split(out, "\n")
	if !strings.HasSuffix(out, "\n") {
		lines = lines[:len(lines)-1] // a line its last piece cut
	} else {
		lines = lines[:len(lines)-1]
	}
	if len(lines) < 41 {
		t.Fatalf("the lost job's record keeps %d lines, want line 0 to at least line 40:\n%s", len(lines), out)
	}
	for i, l := range lines {
		if l != fmt.Sprintf("line %d", i) {
			t.Fatalf("the lost job's output, line %d is %q:\n%s", i, l, out)
		}
	}
	if got.Job.OutputBytes != int64(len(out)) || got.Job.OutputTruncated {
		t.Fatalf("the lost job's record counts %d bytes (truncated %v) for %d kept", got.Job.OutputBytes, got.Job.OutputTruncated, len(out))
	}
	if stdout, errOut, _ := runCLI(t, "logs", "--home", home, long); stdout != out {
		t.Fatalf("logs of the lost job wrote %d bytes (stderr %q), want the record's %d", len(stdout), errOut, len(out))
	}
	last := lines[len(lines)-1]
	stdout, errOut, code := runCLI(t, "job", "--home", home, long)
	if code != 0 || !strings.Contains(stdout, api.ErrDaemonLost) || !strings.Contains(stdout, "\n  "+last+"\n") {
		t.Fatalf("job of the lost job: exit %d, stderr %q, want its error and last line %q:\n%s", code, errOut, last, stdout)
	}

	// The capped job's record keeps its first 200 bytes, and counts what
	// it wrote past them.
	d2.mustCall("job.get", map[string]any{"id": capped}, &got)
	if want := steadyPrefix(200); got.Job.Output != want || !got.Job.OutputTruncated || got.Job.OutputBytes < 1000 {
		t.Fatalf("the capped lost job keeps %q (truncated %v, %d bytes written), want %q, truncated, at least 1000",
			got.Job.Output, got.Job.OutputTruncated, got.Job.OutputBytes, want)
	}
}

// steadyPrefix is the first n bytes steadyLines prints.
func steadyPrefix(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()[:n]
}
