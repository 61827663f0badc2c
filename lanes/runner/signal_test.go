package runner

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// A job killed by a signal says which one: exit_code stays null (the spec's
// Option<i32>) and the orchestrd extension field signal names it.
func TestResultNamesTheTerminatingSignal(t *testing.T) {
	d := startRunner(t, okAck(1))
	o := d.run(wire.Job{JobID: "segv", Command: "kill -SEGV $$"})
	if o.res.Status != wire.StatusFailed || o.res.ExitCode != nil || o.res.Signal != "SIGSEGV" {
		t.Fatalf("result %+v, want Failed, exit_code null, signal SIGSEGV", o.res)
	}
	o = d.run(wire.Job{JobID: "exit", Command: "exit 3"})
	if o.res.Signal != "" || o.res.ExitCode == nil || *o.res.ExitCode != 3 {
		t.Fatalf("result %+v, want exit 3 and no signal", o.res)
	}
}

// Chunks carry the job's bytes exactly, whatever they are.
func TestChunksCarryBinaryOutputExactly(t *testing.T) {
	d := startRunner(t, okAck(1))
	want := make([]byte, 100000)
	rand.Read(want)
	p := filepath.Join(t.TempDir(), "r.bin")
	if err := os.WriteFile(p, want, 0o600); err != nil {
		t.Fatal(err)
	}
	o := d.run(wire.Job{JobID: "bin", Argv: []string{"sh", "-c", `cat "$1"; cat "$1" >&2`, "sh", p}})
	if !bytes.Equal([]byte(o.stdout), want) || !bytes.Equal([]byte(o.stderr), want) {
		t.Fatalf("streamed %d+%d bytes, not the %d written to each stream", len(o.stdout), len(o.stderr), len(want))
	}
}
