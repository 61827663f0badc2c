package state

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

var stages = []string{"submitted", "dispatched", "running", "finished"}

// crashOutput is the output job id "wrote": bytes of every value, of a
// length that depends on the id.
func crashOutput(id string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	rng := rand.New(rand.NewPCG(h.Sum64(), 7))
	b := make([]byte, rng.IntN(8192))
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return string(b)
}

// crashChild is the test binary run again by
// TestKill9KeepsAcknowledgedWrites: it records jobs from several goroutines
// as fast as it can and prints each write once it is acknowledged, until it
// is killed.
func crashChild() {
	s, err := Open(os.Getenv("STATE_TEST_DB"), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	ack := func(id, stage string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(os.Stdout, "%s %s\n", id, stage); err != nil {
			os.Exit(5)
		}
	}
	check := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
	}
	deadline := time.Now().Add(time.Minute) // the test kills it long before
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			jobs := s.Jobs()
			for i := 0; time.Now().Before(deadline); i++ {
				id := fmt.Sprintf("j-%d-%d", g, i)
				spec := api.JobSpec{Command: "sh", Argv: []string{"-c", "echo " + id}, Env: map[string]string{"ID": id}}
				check(jobs.Submit(ctx, submitted(id, "net", spec, time.Now()), spec))
				ack(id, "submitted")
				check(jobs.Dispatch(ctx, id, "net-0", 100+g, time.Now()))
				ack(id, "dispatched")
				check(jobs.Run(ctx, id))
				ack(id, "running")
				out := crashOutput(id)
				code := int32(i % 3)
				check(jobs.Finish(ctx, api.JobRecord{ID: id, Lane: "net", RunnerID: "net-0", RunnerPid: 100 + g,
					State: api.StateSucceeded, ExitCode: &code, Output: out, OutputBytes: int64(len(out))}))
				ack(id, "finished")
			}
		})
	}
	wg.Wait()
	os.Exit(4)
}

// A process that records jobs is killed with SIGKILL in the middle of its
// writes; the file, opened again, has every write it acknowledged, byte for
// byte.
func TestKill9KeepsAcknowledgedWrites(t *testing.T) {
	path := dbPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=crash", "STATE_TEST_DB="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int{} // id -> the last stage acknowledged
	finished, killed := 0, false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		id, stage, _ := strings.Cut(sc.Text(), " ")
		n := -1
		for i, s := range stages {
			if s == stage {
				n = i
			}
		}
		if n < 0 || n < acked[id] {
			t.Fatalf("child said %q", sc.Text())
		}
		acked[id] = n
		if n == len(stages)-1 {
			finished++
		}
		if finished == 400 && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !killed || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended %v before it was killed (%d jobs finished); stderr:\n%s", err, finished, stderr.String())
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("the killed child left no WAL to recover: %v", err)
	}

	s := openT(t, path, testOpts)
	unfinished := 0
	for id, stage := range acked {
		rec, ok, err := s.Jobs().Get(id)
		if err != nil || !ok {
			t.Fatalf("%s was acknowledged %s and is not recorded (%v)", id, stages[stage], err)
		}
		got := map[api.State]int{api.StateQueued: 0, api.StateDispatched: 1, api.StateRunning: 2, api.StateSucceeded: 3}[rec.State]
		if got < stage {
			t.Fatalf("%s was acknowledged %s and is recorded %s", id, stages[stage], rec.State)
		}
		if rec.State == api.StateSucceeded && rec.Output != crashOutput(id) {
			t.Fatalf("%s: the output of %d bytes came back as %d different bytes", id, len(crashOutput(id)), len(rec.Output))
		}
		if rec.State != api.StateSucceeded {
			unfinished++
		}
	}
	un, err := s.Jobs().Unfinished()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range un {
		if st, ok := acked[u.Record.ID]; ok && st >= 1 && !u.MayHaveRun() {
			t.Fatalf("%s was acknowledged %s but would be run again", u.Record.ID, stages[st])
		}
		if u.Spec.Env["ID"] != u.Record.ID {
			t.Fatalf("%s: spec %+v", u.Record.ID, u.Spec)
		}
	}
	if len(un) < unfinished {
		t.Fatalf("%d acknowledged jobs are unfinished, Unfinished lists %d", unfinished, len(un))
	}
	var check string
	if err := s.Do(ctx, &sqlWrite{query: "PRAGMA integrity_check", out: &check}); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
	t.Logf("killed after %d acknowledged writes (%d jobs finished); %d jobs unfinished", countAcks(acked), finished, len(un))
}

func countAcks(acked map[string]int) int {
	n := 0
	for _, st := range acked {
		n += st + 1
	}
	return n
}
