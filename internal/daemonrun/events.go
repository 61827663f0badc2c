package daemonrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// ReadEvents reads the complete lines of the event log at path (the daemon
// may be in the middle of writing the last one), each decoded. A line a
// crash cut short (a daemon killed while writing it; the next daemon starts
// on a new line) is passed over; any other line that is not JSON ends the
// reading: ReadEvents returns the events before it and an error naming it.
func ReadEvents(path string) ([]map[string]any, error) {
	lines, err := completeLines(path)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			if cutShort(line, err) {
				continue
			}
			return out, fmt.Errorf("bad event line %q: %w", line, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// ConfiguredRunners reads the lanes' runner counts from the lane.started
// events of the daemon on home, for the lanes whose event is in the log
// yet.
func ConfiguredRunners(home string) map[string]int {
	out := map[string]int{}
	lines, _ := completeLines(EventLog(home))
	for _, line := range lines {
		var e struct {
			Kind    string `json:"kind"`
			Lane    string `json:"lane"`
			Runners int    `json:"runners"`
		}
		if json.Unmarshal(line, &e) == nil && e.Kind == "lane.started" {
			out[e.Lane] = e.Runners
		}
	}
	return out
}

// completeLines returns the non-empty lines of the file at path that end
// in a newline.
func completeLines(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	} else {
		return nil, nil
	}
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) != 0 {
			out = append(out, line)
		}
	}
	return out, nil
}

// cutShort: err, line's decoding error, says the line is the beginning of
// a JSON object that ends too soon (what a crash leaves), not a bad one.
func cutShort(line []byte, err error) bool {
	var se *json.SyntaxError
	return len(line) > 0 && line[0] == '{' && errors.As(err, &se) && se.Offset == int64(len(line)) &&
		se.Error() == "unexpected end of JSON input"
}
