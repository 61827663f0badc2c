package spool

import (
	"bufio"
	"fmt"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// A spool line over the limit is consumed whole and reported; the lines
// after it are read as they are.
func TestReadSpoolLine(t *testing.T) {
	long := strings.Repeat("x", wire.MaxClankerLine+10)
	br := bufio.NewReaderSize(strings.NewReader("a\r\n"+long+"\nb\nlast"), 4096)
	var got []string
	var sizes []int
	for {
		l, n, size, err := ReadLine(br)
		if n == 0 {
			break
		}
		sizes = append(sizes, size)
		if err != nil {
			got = append(got, "ERR:"+err.Error())
			continue
		}
		got = append(got, string(l))
	}
	want := []string{"a", "ERR:a spool line over 1048576 bytes", "b", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q", got)
	}
	if fmt.Sprint(sizes) != fmt.Sprint([]int{1, len(long), 1, 4}) {
		t.Fatalf("sizes %v, want each line's length without its end", sizes)
	}
}
