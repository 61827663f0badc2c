package runner

import (
	"os/exec"
	"strconv"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// BenchmarkJobRoundTrip is Job{argv: [true]} -> JobAck -> Result through a
// real socket and a real process.
func BenchmarkJobRoundTrip(b *testing.B) {
	d := startRunner(b, okAck(1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id := strconv.Itoa(i)
		if r := d.run(wire.Job{JobID: id, Argv: []string{"true"}}).res; r.Status != wire.StatusSuccess {
			b.Fatalf("result %+v", r)
		}
	}
}

// BenchmarkPlainExec is the baseline: os/exec running true in a loop.
func BenchmarkPlainExec(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
