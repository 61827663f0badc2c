package wire

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ReportMessage is the params of Agor's report_message notification, the
// one message an executor sends by the thousand.
type ReportMessage struct {
	SessionToken string          `json:"session_token"`
	TaskID       string          `json:"task_id"`
	Sequence     int64           `json:"sequence"`
	Timestamp    int64           `json:"timestamp"`
	EventType    string          `json:"event_type"`
	EventData    json.RawMessage `json:"event_data"`
}

// DecodeReportMessage decodes params, which must be valid JSON (ParseRPC
// checked the line), as encoding/json would into a ReportMessage, without
// its reflection: one walk over the object, the strings and numbers read
// in place. It returns false for whatever it does not take on (not an
// object, a number that is not a plain integer, a string of the wrong
// type); the caller then decodes with DecodeRPCParams, which also names
// the problem. FuzzDecodeReportMessage checks the two agree.
func DecodeReportMessage(params []byte) (ReportMessage, bool) { return decodeReport(params, nil) }

// DecodeReportMessage is the package function, its strings made by in:
// the token, task id and event type a stream repeats cost no allocation
// after their first time. EventData aliases params.
func (in *Interner) DecodeReportMessage(params []byte) (ReportMessage, bool) {
	return decodeReport(params, in)
}

// Interner makes strings from bytes, remembering the last few it made and
// giving one of them back when the bytes are the same: for the values a
// stream repeats on every line. Not safe for concurrent use; the zero
// value is ready.
type Interner struct {
	recent [8]string
	next   int
}

// String returns string(b), without an allocation when it made it lately.
func (in *Interner) String(b []byte) string {
	if in == nil {
		return string(b)
	}
	for _, s := range in.recent {
		if s == string(b) { // the comparison does not allocate
			return s
		}
	}
	s := string(b)
	in.recent[in.next] = s
	in.next = (in.next + 1) % len(in.recent)
	return s
}

func decodeReport(params []byte, in *Interner) (ReportMessage, bool) {
	var r ReportMessage
	i := skipJSONSpace(params, 0)
	if i >= len(params) || params[i] != '{' {
		return r, false
	}
	for it := members(params, i); ; {
		key, val, ok := it.next()
		if !ok {
			return r, true
		}
		// encoding/json matches names without regard to case (Unicode
		// simple folding), and so does this.
		name := foldReportKey(key)
		if name == "event_data" {
			r.EventData = json.RawMessage(val)
			continue
		}
		s, n := r.slot(name)
		if s == nil && n == nil {
			continue
		}
		if string(val) == "null" {
			continue // encoding/json leaves the field as it is
		}
		switch {
		case s != nil:
			if val[0] != '"' {
				return r, false
			}
			if content := val[1 : len(val)-1]; plainStringContent(content) && utf8.Valid(content) {
				*s = in.String(content)
			} else if json.Unmarshal(val, s) != nil {
				return r, false
			}
		case n != nil:
			v, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return r, false
			}
			*n = v
		}
	}
}

// slot is the field of r a member named name (a JSON name of
// ReportMessage) is decoded into: a string or an integer; neither for
// event_data and any other name.
func (r *ReportMessage) slot(name string) (*string, *int64) {
	switch name {
	case "session_token":
		return &r.SessionToken, nil
	case "task_id":
		return &r.TaskID, nil
	case "event_type":
		return &r.EventType, nil
	case "sequence":
		return nil, &r.Sequence
	case "timestamp":
		return nil, &r.Timestamp
	}
	return nil, nil
}

var reportKeys = []string{"session_token", "task_id", "event_type", "sequence", "timestamp", "event_data"}

// foldReportKey returns the field name key stands for: itself, or the one
// it equals but for case.
func foldReportKey(key []byte) string {
	k := string(key)
	for _, f := range reportKeys {
		if k == f {
			return f
		}
	}
	for _, f := range reportKeys {
		if strings.EqualFold(k, f) {
			return f
		}
	}
	return ""
}
