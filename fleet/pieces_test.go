package fleet

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/orchestrd/orchestrd/api"
)

func TestParseOffset(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"65536", 65536, true}, {"999999999999999999", 999999999999999999, true},
		{"", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {" 1", 0, false}, {"1 ", 0, false},
		{"0x10", 0, false}, {"1e3", 0, false}, {"1000000000000000000", 0, false}, {"١", 0, false},
	} {
		got, ok := parseOffset(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseOffset(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// cut is one piece of a test output: its offset and length.
type cut struct{ off, n int }

func TestAssembler(t *testing.T) {
	t.Parallel()
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	for _, c := range []struct {
		name    string
		pieces  []cut // in arrival order; n < 0: no offset header
		want    string
		skipped int64
	}{
		{"in order", []cut{{0, 10}, {10, 10}, {20, 16}}, string(data), 0},
		{"a retried piece after its successors", []cut{{0, 10}, {20, 16}, {10, 10}}, string(data), 0},
		{"reversed", []cut{{20, 16}, {10, 10}, {0, 10}}, string(data), 0},
		{"published twice", []cut{{0, 10}, {10, 10}, {10, 10}, {0, 10}, {20, 16}, {20, 16}}, string(data), 0},
		{"twice, once held", []cut{{0, 10}, {20, 16}, {20, 16}, {10, 10}}, string(data), 0},
		{"overlapping", []cut{{0, 12}, {10, 10}, {18, 18}}, string(data), 0},
		{"an older node's, in arrival order", []cut{{0, -10}, {0, -10}, {0, -16}}, string(data[:10]) + string(data[10:20]) + string(data[20:36]), 0},
		{"a gap that never fills", []cut{{0, 10}, {20, 16}}, string(data[:10]) + string(data[20:]), 10},
		{"the start gone", []cut{{10, 10}, {20, 16}}, string(data[10:]), 10},
		{"nothing", nil, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got bytes.Buffer
			a := newAssembler(func(_ string, d []byte) error { got.Write(d); return nil })
			legacy := 0
			for _, p := range c.pieces {
				if p.n < 0 {
					if err := a.add(0, false, "stdout", data[legacy:legacy-p.n]); err != nil {
						t.Fatal(err)
					}
					legacy -= p.n
					continue
				}
				if err := a.add(int64(p.off), true, "stdout", data[p.off:p.off+p.n]); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.flush(); err != nil {
				t.Fatal(err)
			}
			if got.String() != c.want || a.skipped != c.skipped || len(a.held) != 0 || a.heldBytes != 0 {
				t.Fatalf("got %q skipped %d (held %d, %d bytes); want %q skipped %d", got.String(), a.skipped,
					len(a.held), a.heldBytes, c.want, c.skipped)
			}
		})
	}
}

// A gap no piece fills is skipped once the assembler holds heldMax bytes:
// what it holds stays bounded.
func TestAssemblerBounded(t *testing.T) {
	t.Parallel()
	piece := bytes.Repeat([]byte("p"), pieceMax)
	var emitted int64
	a := newAssembler(func(_ string, d []byte) error { emitted += int64(len(d)); return nil })
	// Piece 0 never comes.
	for i := 1; i <= 3*pubWindow; i++ {
		if err := a.add(int64(i*pieceMax), true, "stdout", piece); err != nil {
			t.Fatal(err)
		}
		if a.heldBytes > heldMax {
			t.Fatalf("holds %d bytes, over %d", a.heldBytes, heldMax)
		}
	}
	if a.skipped != pieceMax || emitted == 0 {
		t.Fatalf("skipped %d, emitted %d", a.skipped, emitted)
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	if emitted != 3*pubWindow*pieceMax {
		t.Fatalf("emitted %d of %d", emitted, 3*pubWindow*pieceMax)
	}
}

// Small pieces after a gap that never fills: the assembler holds at most
// heldPiecesMax of them, skips the gap, and gives the rest in order.
func TestAssemblerManySmall(t *testing.T) {
	t.Parallel()
	var got []byte
	a := newAssembler(func(_ string, d []byte) error { got = append(got, d...); return nil })
	const n = 100_000
	for i := 1; i < n; i++ { // piece 0 never comes
		if err := a.add(int64(i), true, "stdout", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if len(a.held) > heldPiecesMax {
			t.Fatalf("holds %d pieces, over %d", len(a.held), heldPiecesMax)
		}
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	if a.skipped != 1 || len(got) != n-1 || got[0] != 1 || got[n-2] != byte((n-1)%256) {
		t.Fatalf("skipped %d, got %d bytes", a.skipped, len(got))
	}
}

// FuzzAssembler: pieces of an output, each published in order but some
// again later (as a failed publication is), some twice, arrive in any
// order within the publisher's window: the assembler gives the output
// back byte for byte.
func FuzzAssembler(f *testing.F) {
	f.Add([]byte("hello, world"), uint64(1))
	f.Add(bytes.Repeat([]byte("abc"), 300), uint64(42))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		var pieces []cut
		for off := 0; off < len(data); {
			n := min(len(data)-off, 1+rng.IntN(64))
			pieces = append(pieces, cut{off, n})
			off += n
		}
		// Arrival: each piece in order, or moved later by up to
		// pubWindow places (a republication), or sent twice.
		// A piece is moved once at most (as a piece is published again
		// once it failed, while those after it wait).
		arrival := slices.Clone(pieces)
		moved := make([]bool, len(arrival))
		for i := range arrival {
			if !moved[i] && rng.IntN(4) == 0 {
				j := min(len(arrival)-1, i+rng.IntN(pubWindow))
				p := arrival[i]
				copy(arrival[i:j], arrival[i+1:j+1])
				copy(moved[i:j], moved[i+1:j+1])
				arrival[j], moved[j] = p, true
			}
		}
		for i := 0; i < len(pieces); i++ {
			if rng.IntN(8) == 0 {
				arrival = append(arrival, pieces[rng.IntN(len(pieces))])
			}
		}
		var got []byte
		a := newAssembler(func(_ string, d []byte) error { got = append(got, d...); return nil })
		for _, p := range arrival {
			if err := a.add(int64(p.off), true, "stdout", data[p.off:p.off+p.n]); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) || a.skipped != 0 {
			t.Fatalf("got %d bytes (skipped %d), want %d, the same", len(got), a.skipped, len(data))
		}
	})
}

func FuzzParseOffset(f *testing.F) {
	f.Add("0")
	f.Add("123456")
	f.Add("-5")
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseOffset(s)
		ref, err := strconv.ParseUint(s, 10, 63)
		refOK := err == nil && len(s) <= 18
		if ok != refOK || ok && n != int64(ref) || n < 0 {
			t.Fatalf("parseOffset(%q) = %d %v; strconv: %d %v", s, n, ok, ref, err)
		}
	})
}

// The output stream elects a new leader again and again while a job
// floods it with output: publications that fail are published again, and
// every reader gets the output byte for byte, in order.
func TestOutputThroughElections(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1}, nodeSpec{})
	a, b, c := ns[0], ns[1], ns[2]
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "flood"})
	if got := b.waitStarted(t); got != id {
		t.Fatalf("b started %s, want %s", got, id)
	}
	var mu sync.Mutex
	var followed bytes.Buffer
	type result struct {
		rec api.JobRecord
		err error
	}
	res := make(chan result, 1)
	go func() {
		rec, err := a.f.Follow(context.Background(), id, func(_ string, d []byte) error {
			mu.Lock()
			followed.Write(d)
			mu.Unlock()
			return nil
		})
		res <- result{rec, err}
	}()
	size := func() int {
		mu.Lock()
		defer mu.Unlock()
		return followed.Len()
	}
	leader := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		info, err := c.f.js.Stream(ctx, outputStream)
		if err != nil {
			return ""
		}
		if ci := info.CachedInfo().Cluster; ci != nil {
			return ci.Leader
		}
		return ""
	}
	// Five elections, output flowing before and after each.
	for i := range 5 {
		before := size()
		waitFor(t, "output flowing", func() bool { return size() > before+4096 })
		old := leader()
		if old == "" {
			t.Fatal("the output stream has no leader")
		}
		// Asked again while it has not stepped down (a request that
		// timed out under load, or an answer that it could not yet).
		waitEvery(t, 500*time.Millisecond, fmt.Sprintf("election %d", i+1), func() bool {
			if l := leader(); l != "" && l != old {
				return true
			}
			msg, err := c.f.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+outputStream, nil, opTimeout)
			if err != nil {
				t.Logf("election %d: step down: %v", i+1, err)
				return false
			}
			var sd struct {
				Success bool `json:"success"`
			}
			if json.Unmarshal(msg.Data, &sd) != nil || !sd.Success {
				t.Logf("election %d: step down: %s", i+1, msg.Data)
			}
			return false
		})
		t.Logf("election %d at %d bytes followed", i+1, size())
	}
	before := size()
	waitFor(t, "output flowing after the elections", func() bool { return size() > before+4096 })
	if !b.local.release(id, api.StateSucceeded) {
		t.Fatal("the flood job is not running on b")
	}
	var got result
	select {
	case got = <-res:
	case <-time.After(testWait):
		t.Fatal("the follow did not end")
	}
	if got.err != nil || got.rec.State != api.StateSucceeded {
		t.Fatalf("follow: %v %+v", got.err, got.rec)
	}
	want := floodBytes(id, got.rec.OutputBytes)
	if int64(len(want)) != got.rec.OutputBytes {
		t.Fatalf("the record says %d bytes; the flood's pieces do not end there", got.rec.OutputBytes)
	}
	if !bytes.Equal(followed.Bytes(), want) {
		t.Fatalf("a followed %d bytes of %d, not the same (first difference at %d)", followed.Len(), len(want),
			firstDiff(followed.Bytes(), want))
	}
	t.Logf("followed %d bytes", followed.Len())
	gr, found, err := c.f.Get(id)
	if err != nil || !found || gr.OutputEvicted || gr.Output != string(want) {
		t.Fatalf("c's get: %v %v evicted %v, %d bytes of %d", err, found, gr.OutputEvicted, len(gr.Output), len(want))
	}
	if lost := b.ev.kinds("cluster.output_republished"); len(lost) > 0 {
		if e := lost[0].(ClusterOutputRepublished); e.Lost != 0 || e.JobID != id {
			t.Fatalf("output_republished: %+v", e)
		}
		t.Logf("%+v", lost[0])
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// FuzzCheckPiece: a piece read on a job's taker's subject passes only if
// it is exactly what the taker signed: its job, its offset, its stream,
// its bytes.
func FuzzCheckPiece(f *testing.F) {
	id := fuzzIdentity(f)
	key, err := nkeys.FromPublicKey(id.pub)
	if err != nil {
		f.Fatal(err)
	}
	c := takeClaim{ID: "c-ab-1", Node: "a", Incarnation: "i", key: key}
	data := []byte("output")
	good := id.sign(pieceMsg(c.ID, "a", 12, "stdout", data))
	goodRaw, _ := base64.RawURLEncoding.DecodeString(good)
	f.Add("12", "stdout", good, data)
	f.Add("12", "stderr", good, data)
	f.Add("13", "stdout", good, data)
	f.Add("12", "stdout", good, []byte("outpuT"))
	f.Add("12", "stdout", "", data)
	f.Add("", "stdout", good, data)
	f.Add("12", "stdout", good[:10], data)
	f.Fuzz(func(t *testing.T, off, stream, sig string, d []byte) {
		h := nats.Header{}
		h.Set(hdrOffset, off)
		h.Set(hdrStream, stream)
		h.Set(hdrSig, sig)
		gotOff, gotStream, why := checkPiece(c, c.ID, h, d)
		// The same signature in another spelling of base64 is the same.
		raw, _ := base64.RawURLEncoding.DecodeString(sig)
		o, hasOff := parseOffset(off)
		ok := hasOff && o == 12 && stream == "stdout" && bytes.Equal(raw, goodRaw) && bytes.Equal(d, data)
		if (why == "") != ok {
			t.Fatalf("offset %q stream %q sig %q data %q: why %q", off, stream, sig, d, why)
		}
		if ok && (gotOff != 12 || gotStream != "stdout") {
			t.Fatalf("passed as %d %s", gotOff, gotStream)
		}
	})
}
