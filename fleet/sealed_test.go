package fleet

import (
	"bytes"
	"path/filepath"
	"testing"
)

// fuzzIdentity is node "a"'s identity in a fleet made for the fuzz test.
func fuzzIdentity(f *testing.F) *identity {
	f.Helper()
	dir := f.TempDir()
	if _, _, err := InitFleet(dir, "a", nil, false); err != nil {
		f.Fatal(err)
	}
	id, err := readIdentity(filepath.Join(dir, CredentialsFile), "")
	if err != nil {
		f.Fatal(err)
	}
	return id
}

// FuzzOpen: whatever a bucket holds, open never panics, and what it opens
// is exactly what a node of the fleet sealed under that key.
func FuzzOpen(f *testing.F) {
	id := fuzzIdentity(f)
	v := []byte(`{"record":{"id":"c-ab-1","state":"queued"}}`)
	good, err := id.seal(sealJobs, "c-ab-1", v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("c-ab-1", good)
	f.Add("c-ab-2", good)
	f.Add("c-ab-1", v)
	f.Add("c-ab-1", []byte(`{"v":{},"by":"a","key":"","cert":"","sig":"x"}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		var c certs
		got, by, err := c.open(id.fleet, sealJobs, key, b)
		if err != nil {
			if _, ok := isRefused(err); !ok {
				t.Fatalf("an error that is not a refusal: %v", err)
			}
			return
		}
		if key != "c-ab-1" || by.name != "a" || !bytes.Equal(got, v) {
			t.Fatalf("opened %q by %q under %q", got, by, key)
		}
	})
}
