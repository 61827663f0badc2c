package gitwt

import (
	"bytes"
	"testing"
)

// statusPaths never panics, names at most one path a record, and each
// path is what a record held after its status letters.
func FuzzStatusPaths(f *testing.F) {
	for _, s := range []string{"", " M a\x00", "R  new\x00old\x00 M b\x00", "C  x", "R \x00", "MM \x00\x00\x00", "?? u\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, st []byte) {
		paths := statusPaths(st)
		if len(paths) > bytes.Count(st, []byte{0})+1 {
			t.Fatalf("%d paths from %q", len(paths), st)
		}
		for _, p := range paths {
			if !bytes.Contains(st, []byte(p)) {
				t.Fatalf("path %q not in %q", p, st)
			}
		}
	})
}
