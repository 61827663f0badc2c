package nodefigs

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// memTotal is /proc/meminfo's MemTotal in bytes.
func memTotal(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

func TestReadPlausible(t *testing.T) {
	home := t.TempDir()
	f, err := Read(context.Background(), home)
	if err != nil {
		t.Fatal(err)
	}
	if f.CPUs != runtime.NumCPU() {
		t.Errorf("cpus = %d, runtime.NumCPU() = %d", f.CPUs, runtime.NumCPU())
	}
	if want := memTotal(t); f.MemTotalBytes != want {
		t.Errorf("mem_total_bytes = %d, /proc/meminfo MemTotal = %d", f.MemTotalBytes, want)
	}
	if f.MemAvailBytes == 0 || f.MemAvailBytes > f.MemTotalBytes {
		t.Errorf("mem_available_bytes = %d of %d", f.MemAvailBytes, f.MemTotalBytes)
	}
	if f.Load1 < 0 || f.HomeFreeBytes == 0 || f.HomeFreeBytes > f.HomeTotalBytes {
		t.Errorf("implausible figures %+v", f)
	}
	if _, err := Read(context.Background(), home+"/missing"); err == nil {
		t.Error("a missing home gave no error")
	}
}
