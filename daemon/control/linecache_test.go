package control

import "testing"

// The kept buffers of big answers: at most keptLines, none over
// maxKeptLine, a get takes one with room enough (and only once), and drop
// lets them all go.
func TestLineCache(t *testing.T) {
	var c lineCache
	if b := c.get(1); b != nil {
		t.Fatalf("an empty cache gave a buffer of %d", cap(b))
	}
	c.put(make([]byte, 10, 1<<20))
	c.put(make([]byte, 0, 2<<20))
	c.put(make([]byte, 0, 3<<20)) // over keptLines: not kept
	c.put(make([]byte, 0, maxKeptLine+1))
	if len(c.bufs) != keptLines {
		t.Fatalf("%d buffers kept, want %d", len(c.bufs), keptLines)
	}
	if b := c.get(3 << 20); b != nil {
		t.Fatalf("no kept buffer has room for 3 MiB, got %d", cap(b))
	}
	b := c.get(1<<20 + 1)
	if cap(b) != 2<<20 || len(b) != 0 {
		t.Fatalf("get(1 MiB + 1): len %d cap %d, want an empty 2 MiB buffer", len(b), cap(b))
	}
	if b := c.get(1 << 20); cap(b) != 1<<20 || len(b) != 0 {
		t.Fatalf("get(1 MiB): len %d cap %d", len(b), cap(b))
	}
	if b := c.get(1); b != nil {
		t.Fatal("a buffer given twice")
	}
	c.put(b)
	c.drop()
	if b := c.get(1); b != nil || c.timer != nil {
		t.Fatal("drop kept a buffer or its timer")
	}
}
