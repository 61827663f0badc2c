//go:build !race

// The race detector makes sync.Pool drop what is put back at random (and
// json.Valid pools its scanners), so allocation counts mean something only
// without it.

package wire

import "testing"

func TestRPCAllocations(t *testing.T) {
	// Decoding a params-less notification of a known method costs nothing;
	// params cost their one copy.
	for line, want := range map[string]float64{
		`{"jsonrpc":"2.0","method":"pause_notifications"}`:                    0,
		`{"jsonrpc":"2.0","method":"report_message","params":{"sequence":1}}`: 1,
	} {
		b := []byte(line)
		allocs := testing.AllocsPerRun(100, func() {
			if _, derr := ParseRPC(b); derr != nil {
				t.Fatal(derr)
			}
		})
		if allocs > want {
			t.Errorf("ParseRPC(%s) allocates %v times, want %v", line, allocs, want)
		}
	}
	// Encoding a decoded message (forwarding it) into a buffer with room
	// costs nothing.
	m, derr := ParseRPC([]byte(agorLines["report_message"]))
	if derr != nil {
		t.Fatal(derr)
	}
	buf := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = AppendRPCMessage(buf[:0], m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("AppendRPCMessage allocates %v times", allocs)
	}
}
