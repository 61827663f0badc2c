package proctree

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	line := func(comm string, rest string) string { return "42 (" + comm + ") " + rest }
	// state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
	fields := "S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0 100"
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{line("sh", fields), 35},
		{line("a) (b c", fields), 35}, // a command with spaces and parentheses
		{line("sh", "S 1 42 42 0 -1 4194304 10 0 0 0 7 3"), 0},
		{line("sh", "S 1 42 42 0 -1 4194304 10 0 0 0 7 -3 20 5"), 0},
		{line("sh", "S 1 42 42 0 -1 4194304 10 0 0 0 x 3 20 5"), 0},
		{"42 sh S 1", 0},
		{"", 0},
	} {
		if got := statCPU([]byte(c.in)); got != c.want {
			t.Errorf("statCPU(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func FuzzStatCPU(f *testing.F) {
	f.Add([]byte("42 (sh) S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0 100"))
	f.Add([]byte("1 ()) ) 9223372036854775807 9223372036854775807 9223372036854775807"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = statCPU(b) // never panics
	})
}

// A child started with ORCHESTRD_TEST_JOB=x is found by its value, and
// its tree's CPU time grows as a grandchild burns CPU.
func TestChildrenByEnvAndTreeUsage(t *testing.T) {
	cmd := exec.Command("sh", "-c", "(while :; do :; done) & wait")
	cmd.Env = append(os.Environ(), "ORCHESTRD_TEST_JOB=x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		by := ChildrenByEnv(os.Getpid(), "ORCHESTRD_TEST_JOB")
		if len(by["x"]) == 1 && by["x"][0] == pid {
			if u := TreeUsage(pid); u.CPUTicks >= 20 && u.RSSBytes > 0 {
				break // a fifth of a second of CPU, counted beneath sh
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("children by env %v, usage of %d: %+v", ChildrenByEnv(os.Getpid(), "ORCHESTRD_TEST_JOB"),
				pid, TreeUsage(pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if u := TreeUsage(1 << 30); u != (Usage{}) {
		t.Fatalf("usage of a missing pid: %+v", u)
	}
	if by := ChildrenByEnv(os.Getpid(), "ORCHESTRD_NO_SUCH_"+strconv.Itoa(pid)); len(by) != 0 {
		t.Fatalf("children with an unset variable: %v", by)
	}
}
