// Package nodefigs reads the figures of the machine a daemon runs on (its
// CPU count, memory, load and the free space of the daemon's home) through
// gopsutil. Only the daemon's side imports it: the runner stays lean
// (internal/layout's TestRunnerLean checks it).
package nodefigs

import (
	"context"
	"fmt"
	"runtime"

	"github.com/orchestrd/orchestrd/api"

	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
)

// Figures are one reading of a node's figures.
type Figures = api.NodeFigures

// Read takes a reading; home is the directory whose file system's free
// space is reported. A figure that cannot be read makes the error (the
// others are kept in the answer).
func Read(ctx context.Context, home string) (Figures, error) {
	f := Figures{CPUs: runtime.NumCPU()}
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return f, fmt.Errorf("reading the node's memory: %w", err)
	}
	f.MemTotalBytes, f.MemAvailBytes = vm.Total, vm.Available
	la, err := load.AvgWithContext(ctx)
	if err != nil {
		return f, fmt.Errorf("reading the node's load: %w", err)
	}
	f.Load1, f.Load5, f.Load15 = la.Load1, la.Load5, la.Load15
	if home != "" {
		du, err := disk.UsageWithContext(ctx, home)
		if err != nil {
			return f, fmt.Errorf("reading the free space of the home: %w", err)
		}
		f.HomeFreeBytes, f.HomeTotalBytes = du.Free, du.Total
	}
	return f, nil
}

// MemAvailable is the node's available memory alone (MemAvailable), for
// a check made often.
func MemAvailable() (uint64, error) {
	vm, err := mem.VirtualMemory()
	if err != nil {
		return 0, fmt.Errorf("reading the node's available memory: %w", err)
	}
	return vm.Available, nil
}
