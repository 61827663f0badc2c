package eventlog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"time"
)

// errTailFull stops Tail's backward read once it has what it wants.
var errTailFull = errors.New("tail: enough lines")

// errTailOld stops it at lines older than the query's Since.
var errTailOld = errors.New("tail: older than since")

// tailSlack is how far out of time order the log's lines may be.
const tailSlack = 5 * time.Second

// tailBlock is how much Tail reads at a time, from a file's end back.
const tailBlock = 64 << 10

// Tail returns the last n lines of the log at path (and its rotated
// files) that q matches, oldest first, and whether older lines match too.
// It reads from the end back, so its cost is in the lines it passes over,
// not the log's size (with q.Since, it stops at the lines before it).
// q.Follow and q.OnIdle are ignored.
func Tail(ctx context.Context, path string, q Query, n int) ([]Line, bool, error) {
	if n <= 0 {
		return nil, false, nil
	}
	var out []Line
	more := false
	r := newReader(ctx, path, q, func(l Line) error {
		if len(out) == n {
			more = true
			return errTailFull
		}
		out = append(out, l)
		return nil
	})
	files := []string{path}
	for _, i := range rotatedIndexes(path) {
		files = append(files, rotatedName(path, i))
	}
	// With q.Since the read stops at the first line older than it by
	// tailSlack: the log is in time order but for emitters racing to it.
	each := r.handle
	if !q.Since.IsZero() {
		stop := q.Since.Add(-tailSlack)
		each = func(raw []byte) error {
			if h, ok := parseHeader(raw); ok && h.ts.Before(stop) {
				return errTailOld
			}
			return r.handle(raw)
		}
	}
	var err error
	for _, name := range files {
		if err = tailFile(name, each); err != nil {
			break
		}
	}
	if err != nil && !errors.Is(err, errTailFull) && !errors.Is(err, errTailOld) && !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	slices.Reverse(out)
	return out, more, nil
}

// tailFile hands each line of the file to each, the last line first.
func tailFile(name string, each func([]byte) error) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	off := st.Size()
	var carry []byte // the start of a line whose end was read already
	buf := make([]byte, tailBlock)
	for off > 0 {
		start := max(0, off-tailBlock)
		b := buf[:off-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		chunk := append(append([]byte(nil), b...), carry...)
		for {
			i := bytes.LastIndexByte(chunk, '\n')
			if i < 0 {
				break
			}
			if line := chunk[i+1:]; len(line) > 0 {
				if err := each(line); err != nil {
					return err
				}
			}
			chunk = chunk[:i]
		}
		carry = chunk
		off = start
	}
	if len(carry) > 0 {
		return each(carry)
	}
	return nil
}
