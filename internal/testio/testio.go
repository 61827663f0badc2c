// Package testio holds small I/O helpers for tests and benchmarks.
package testio

import (
	"bytes"
	"sync"
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
