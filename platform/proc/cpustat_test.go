package proc

import "testing"

func TestCPUStat(t *testing.T) {
	for _, c := range []struct {
		in        string
		user, sys uint64
		ok        bool
	}{
		{"usage_usec 300\nuser_usec 200\nsystem_usec 100\nnice_usec 0\n", 200, 100, true},
		{"usage_usec 300\nuser_usec 200\n", 0, 0, false},
		{"user_usec x\nsystem_usec 1\n", 0, 0, false},
		{"", 0, 0, false},
	} {
		u, s, ok := cpuStat([]byte(c.in))
		if ok != c.ok || (ok && (u != c.user || s != c.sys)) {
			t.Errorf("cpuStat(%q) = %d, %d, %v", c.in, u, s, ok)
		}
	}
}

func FuzzCPUStat(f *testing.F) {
	f.Add([]byte("usage_usec 300\nuser_usec 200\nsystem_usec 100\n"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _, _ = cpuStat(b) })
}
