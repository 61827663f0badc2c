package spool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/orchestrd/orchestrd/wire"
)

// Line is one line of the taken file, as Read hands it on.
type Line struct {
	// Text is the line without its newline (and a CR before it); of a
	// line over wire.MaxClankerLine, its first 256 bytes.
	Text []byte
	// Size is the line's length without its newline (and CR).
	Size int
	// First: the line starts the file (see MayBeCut).
	First bool
	// Entry is the request the line holds, when Err is nil.
	Entry wire.SpoolEntry
	// Err says why the line holds no request: it is over
	// wire.MaxClankerLine, or not a spool entry (wire.DecodeSpoolLine).
	Err error
}

// Read reads up to max lines of the taken file f from offset, in file
// order, handing each to each; blank lines are skipped and not counted.
// It returns the offset after the last line read, the lines handed on,
// and whether f is read to its end (size: f's size, as stat'ed before).
// err is a failure to read f: with it, what was read before it is
// returned (a failure to seek to offset returns offset, 0, false).
func Read(f *os.File, offset, size int64, max int, each func(Line)) (next int64, lines int, eof bool, err error) {
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, 0, false, err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	pos := offset
	for lines < max {
		text, n, lineLen, lerr := ReadLine(br)
		if n == 0 && lerr != nil {
			eof = errors.Is(lerr, io.EOF)
			if !eof {
				err = lerr
			}
			break
		}
		first := pos == 0
		pos += int64(n)
		if len(bytes.TrimSpace(text)) == 0 && lerr == nil {
			continue
		}
		lines++
		l := Line{Text: text, Size: lineLen, First: first, Err: lerr}
		if lerr == nil {
			l.Entry, l.Err = wire.DecodeSpoolLine(text)
		}
		each(l)
	}
	if !eof && pos >= size {
		eof = true
	}
	return pos, lines, eof, err
}

// ReadLine reads one line (without its newline); n is the bytes
// consumed, size the line's length without its newline (and a CR before
// it). A line over wire.MaxClankerLine is consumed whole and returned cut,
// with an error saying so.
func ReadLine(br *bufio.Reader) (line []byte, n, size int, err error) {
	var buf []byte
	over := false
	for {
		frag, err := br.ReadSlice('\n')
		n += len(frag)
		size += len(frag)
		if !over {
			if len(buf)+len(frag) > wire.MaxClankerLine+1 {
				over = true
				buf = append(buf, frag[:min(len(frag), 256)]...)
			} else {
				buf = append(buf, frag...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == nil:
			buf = bytes.TrimSuffix(buf, []byte("\n"))
			size--
		case errors.Is(err, io.EOF) && n > 0:
			// A last line without its newline: its writer is done (the
			// file is no longer open), so it is whole.
		default:
			return nil, n, 0, err
		}
		if over {
			return buf, n, size, fmt.Errorf("a spool line over %d bytes", wire.MaxClankerLine)
		}
		if bytes.HasSuffix(buf, []byte("\r")) {
			buf, size = buf[:len(buf)-1], size-1
		}
		return buf, n, size, nil
	}
}
