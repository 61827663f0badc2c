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
func ReadEvents(path string) ([]map[string]any, error) { return readEvents(path, nil) }

// ReadEventsOfKind is ReadEvents of the events of one kind: only a line
// that holds the kind as a JSON string is decoded (every other one is
// checked to be JSON, nothing more), so that a wait polling a long log
// decodes what it waits for, not the whole log each time.
func ReadEventsOfKind(path, kind string) ([]map[string]any, error) {
	quoted, err := json.Marshal(kind)
	if err != nil {
		return nil, err
	}
	evs, err := readEvents(path, func(line []byte) bool { return bytes.Contains(line, quoted) })
	out := evs[:0]
	for _, e := range evs {
		if e["kind"] == kind {
			out = append(out, e)
		}
	}
	return out, err
}

// readEvents is ReadEvents of the lines decode accepts (nil: all); the
// others are only checked to be JSON.
func readEvents(path string, decode func([]byte) bool) ([]map[string]any, error) {
	lines, err := completeLines(path)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, line := range lines {
		if decode != nil && !decode(line) && json.Valid(line) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			if cutShort(line, err) {
				continue
			}
			return out, fmt.Errorf("bad event line %q: %w", line, err)
		}
		if decode == nil || decode(line) {
			out = append(out, m)
		}
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
