package nodefigs

import (
	"context"
	"runtime"
	"testing"

	"github.com/orchestrd/orchestrd/internal/testio"
)

func TestReadPlausible(t *testing.T) {
	home := t.TempDir()
	f, err := Read(context.Background(), home)
	if err != nil {
		t.Fatal(err)
	}
	if f.CPUs != runtime.NumCPU() {
		t.Errorf("cpus = %d, runtime.NumCPU() = %d", f.CPUs, runtime.NumCPU())
	}
	if want := testio.MemTotal(t); f.MemTotalBytes != want {
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
