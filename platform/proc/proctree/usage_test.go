package proctree

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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

// A child's tree's CPU time, its reaped children's included, grows as a
// grandchild burns CPU; a missing pid has none.
func TestCPUTicks(t *testing.T) {
	cmd := exec.Command("sh", "-c", "(while :; do :; done) & wait")
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
		var ticks uint64
		for _, f := range strings.Fields(string(Children(nil, pid))) {
			c, _ := strconv.Atoi(f)
			ticks += CPUTicks(c)
		}
		if ticks >= 20 {
			break // a fifth of a second of CPU, counted beneath sh
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU ticks beneath %d: %d", pid, ticks)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if CPUTicks(1<<30) != 0 {
		t.Fatal("CPU ticks of a missing pid")
	}
}

func TestNSPids(t *testing.T) {
	self, ok := NSPids(os.Getpid())
	if !ok || len(self) == 0 || self[0] != os.Getpid() {
		t.Fatalf("NSPids(self) = %v, %v", self, ok)
	}
	if _, ok := NSPids(1 << 30); ok {
		t.Fatal("NSPids of a missing pid")
	}
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"Name:\tsh\nNSpid:\t42\n", []int{42}},
		{"NStgid:\t42\t3\nNSpid:\t42\t3\nNSpgid:\t1\n", []int{42, 3}},
		{"Name:\tsh\n", nil},
		{"NSpid:\n", nil},
		{"NSpid:\t42\tx\n", nil},
		{"NSpid:\t-1\n", nil},
	} {
		got, ok := nsPids([]byte(c.in))
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("nsPids(%q) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
}

func FuzzNSPids(f *testing.F) {
	f.Add([]byte("Name:\tsh\nNSpid:\t42\t3\n"))
	f.Add([]byte("NSpid:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, ok := nsPids(b); ok && len(p) == 0 {
			t.Fatal("ok with no pid")
		}
	})
}
