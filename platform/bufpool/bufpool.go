// Package bufpool keeps byte buffers for reuse, in size classes, with a
// bound on what it keeps: output streamed at full speed reuses its buffers
// rather than allocate one a piece (and keep the garbage collector busy),
// and what a burst left behind stays small. A sync.Pool keeps whatever was
// put in it until the collector runs, which on a daemon that stopped
// allocating may be a long time: its idle memory would hold a burst's worth.
package bufpool

// Pool is buffers in classes from Min bytes up, each twice the last, to
// Max; at most Keep free buffers a class. Safe for concurrent use.
type Pool struct {
	min, max int
	free     []chan []byte
}

// New is a pool of classes from min to max bytes (min > 0, max a power of
// two times min), keeping at most keep free buffers of each.
func New(min, max, keep int) *Pool {
	p := &Pool{min: min, max: max}
	for size := min; size <= max; size *= 2 {
		p.free = append(p.free, make(chan []byte, keep))
	}
	return p
}

// class is the class of a buffer of capacity n, -1 for none.
func (p *Pool) class(n int) int {
	if n <= 0 || n > p.max {
		return -1
	}
	c, size := 0, p.min
	for size < n {
		c, size = c+1, size*2
	}
	return c
}

// Get is an empty buffer with room for n bytes: its class's size, reused
// if one is free; more than Max, a buffer of its own.
func (p *Pool) Get(n int) []byte {
	c := p.class(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	select {
	case b := <-p.free[c]:
		return b
	default:
		return make([]byte, 0, p.min<<c)
	}
}

// Put hands b back once nothing uses it: kept if its capacity is a
// class's size and the class has room, else left to the collector.
func (p *Pool) Put(b []byte) {
	c := p.class(cap(b))
	if c < 0 || cap(b) != p.min<<c {
		return
	}
	select {
	case p.free[c] <- b[:0]:
	default:
	}
}
