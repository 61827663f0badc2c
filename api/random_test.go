package api

import (
	"encoding/hex"
	"testing"
)

func TestRandomHex(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range []int{0, 1, 3, 8, 32} {
		for range 100 {
			s := RandomHex(n)
			if b, err := hex.DecodeString(s); err != nil || len(b) != n {
				t.Fatalf("RandomHex(%d) = %q", n, s)
			}
			if n >= 8 && seen[s] {
				t.Fatalf("RandomHex(%d) gave %q twice", n, s)
			}
			seen[s] = true
		}
	}
}
