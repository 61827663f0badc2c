package bufpool

import "testing"

// Get gives a class's size (reused once put back), a buffer of its own
// beyond the largest class; Put keeps at most keep of a class and nothing
// of a size no class has.
func TestPool(t *testing.T) {
	p := New(8, 64, 2)
	for n, want := range map[int]int{1: 8, 8: 8, 9: 16, 33: 64, 64: 64, 65: 65} {
		if b := p.Get(n); len(b) != 0 || cap(b) != want {
			t.Errorf("Get(%d): len %d cap %d, want 0 and %d", n, len(b), cap(b), want)
		}
	}
	a, b, c := p.Get(16), p.Get(16), p.Get(16)
	a = append(a, "x"...)
	p.Put(a)
	p.Put(b)
	p.Put(c)                    // over keep: dropped
	p.Put(make([]byte, 0, 24))  // no class's size
	p.Put(make([]byte, 0, 128)) // beyond the classes
	if got := len(p.free[1]); got != 2 {
		t.Fatalf("%d free buffers of 16 bytes kept, want 2", got)
	}
	if got := p.Get(10); len(got) != 0 || cap(got) != 16 || &got[:1][0] != &a[:1][0] {
		t.Fatalf("Get(10) after Put: len %d cap %d, not the buffer put back first", len(got), cap(got))
	}
	for i := range p.free {
		if i != 1 && len(p.free[i]) != 0 {
			t.Fatalf("class %d keeps %d buffers", i, len(p.free[i]))
		}
	}
}
