package runner

import (
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// BenchmarkOutputRaw streams 64 MiB of a job's output in OutputRaw frames
// to a daemon reading as fast as it can. cpu-ms/MiB is this process's CPU
// (the runner and the fake daemon, not the job) a MiB moved; frames/MiB
// how many frames carried it.
func BenchmarkOutputRaw(b *testing.B) {
	const size = 64 << 20
	d := startRunner(b, rawAck(1<<40))
	b.SetBytes(size)
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	frames := 0
	for i := 0; b.Loop(); i++ {
		id := strconv.Itoa(i)
		d.send(wire.TypeJob, wire.Job{JobID: id, Command: "exec head -c " + strconv.Itoa(size) + " /dev/zero"})
		got := 0
		for done := false; !done; {
			f := <-d.frames
			switch f.t {
			case wire.TypeOutputRaw:
				_, _, chunk, err := wire.ParseOutputRaw(f.p)
				if err != nil {
					b.Fatal(err)
				}
				got += len(chunk)
				frames++
			case wire.TypeResult:
				done = true
			}
		}
		if got != size {
			b.Fatalf("%d of %d bytes", got, size)
		}
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N*(size>>20)), "cpu-ms/MiB")
	b.ReportMetric(float64(frames)/float64(b.N*(size>>20)), "frames/MiB")
}
