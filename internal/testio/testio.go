// Package testio holds small I/O helpers for tests and benchmarks.
package testio

import (
	"bytes"
	"io"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that a process's writer (a logger, a child's
// stderr) and the test reading it can share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Hammer runs f over and over in n goroutines, until f returns false (in
// that goroutine) or stop is called; stop returns once every one has.
func Hammer(n int, f func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if !f() {
					return
				}
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// Eventually polls cond until it holds; t fails saying what it waited for
// if it does not hold within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// StartPiped starts cmd, its stdout a pipe for the test to read; if it is
// still running at the test's end it is killed there, and waited for.
func StartPiped(t testing.TB, cmd *exec.Cmd) io.ReadCloser {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return out
}
