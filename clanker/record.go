package clanker

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
)

// record is a JSON object that keeps its members in order and every member
// it does not know, as clanker's JavaScript keeps them: a task file
// written by orchestrd is what clanker would write for the same task
// (JSON.stringify(task, null, 2)), extra fields included.
type record struct {
	keys []string
	vals map[string]json.RawMessage
}

func newRecord() *record { return &record{vals: map[string]json.RawMessage{}} }

// parseRecord decodes one JSON object, keeping its members' order (a
// repeated member keeps its first place and its last value, as
// JSON.parse does).
func parseRecord(b []byte) (*record, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	r := newRecord()
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		r.set(key, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return r, nil
}

func (r *record) clone() *record {
	c := &record{keys: append([]string(nil), r.keys...), vals: make(map[string]json.RawMessage, len(r.vals))}
	for k, v := range r.vals {
		c.vals[k] = v
	}
	return c
}

func (r *record) has(key string) bool { _, ok := r.vals[key]; return ok }

func (r *record) set(key string, v json.RawMessage) {
	if _, ok := r.vals[key]; !ok {
		r.keys = append(r.keys, key)
	}
	r.vals[key] = v
}

// setString sets key to a JSON string.
func (r *record) setString(key, s string) { r.set(key, jsonString(s)) }

// del removes key (JavaScript's task.key = undefined: JSON.stringify
// leaves it out).
func (r *record) del(key string) {
	if _, ok := r.vals[key]; !ok {
		return
	}
	delete(r.vals, key)
	for i, k := range r.keys {
		if k == key {
			r.keys = append(r.keys[:i], r.keys[i+1:]...)
			break
		}
	}
}

// str is key's value if it is a string; "" otherwise.
func (r *record) str(key string) string {
	v, ok := r.vals[key]
	if !ok || len(v) == 0 || v[0] != '"' {
		return ""
	}
	var s string
	_ = json.Unmarshal(v, &s)
	return s
}

// compact is the record as one line of JSON.
func (r *record) compact() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range r.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(k))
		b.WriteByte(':')
		_ = json.Compact(&b, r.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// file is the record as clanker writes a task file: JSON.stringify(task,
// null, 2), no newline at the end.
func (r *record) file() []byte {
	var b bytes.Buffer
	_ = json.Indent(&b, r.compact(), "", "  ")
	return b.Bytes()
}

func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// The task statuses clanker knows.
var taskStatuses = map[string]bool{"queued": true, "running": true, "needs_judge": true, "rework": true,
	"done": true, "blocked": true, "paused": true, "failed": true}

// validTask checks a task record as clanker's saveTask does
// (parseTaskRecord, then validateTaskRecord): an id, a known status, a
// prompt, string arrays of non-empty ownerDirs and ownerFiles, a string
// resumeSlaveId, numeric usage. The error names every problem.
func validTask(r *record) error {
	// errs name the problems as the pod hears them; logs is the same
	// without the values it sent (refusal).
	var errs, logs []string
	both := func(s string) { errs, logs = append(errs, s), append(logs, s) }
	id := r.str("id")
	if id == "" {
		both("missing id")
	} else if err := validTaskID(id); err != nil {
		errs, logs = append(errs, err.Error()), append(logs, logText(err))
	}
	if st := r.str("status"); !taskStatuses[st] {
		const want = " (want one of queued, running, needs_judge, rework, done, blocked, paused, failed)"
		errs, logs = append(errs, "invalid status "+valueText(r.vals["status"])+want), append(logs, "invalid status"+want)
	}
	if r.str("prompt") == "" {
		both("missing prompt")
	}
	for _, k := range []string{"ownerDirs", "ownerFiles"} {
		v, ok := r.vals[k]
		if !ok || string(v) == "null" {
			continue
		}
		var ss []string
		if json.Unmarshal(v, &ss) != nil || v[0] != '[' {
			both("invalid " + k + " (want an array of strings)")
			continue
		}
		for _, s := range ss {
			if s == "" {
				both("invalid " + k + " (an empty entry)")
				break
			}
		}
	}
	for _, k := range []string{"resumeSlaveId", "assignedSlaveId", "title", "promptedAt", "judgePromptedAt"} {
		if v, ok := r.vals[k]; ok && string(v) != "null" && v[0] != '"' {
			both("invalid " + k + " (want a string)")
		}
	}
	if v, ok := r.vals["usage"]; ok && string(v) != "null" {
		var u map[string]json.RawMessage
		if json.Unmarshal(v, &u) != nil || v[0] != '{' {
			both("invalid usage (want an object)")
		} else {
			for _, k := range []string{"tokens", "cost"} {
				if !isNumber(u[k]) {
					both("invalid usage." + k + " (want a number)")
				}
			}
			for _, k := range []string{"judgeTokens", "judgeCost"} {
				if x, ok := u[k]; ok && string(x) != "null" && !isNumber(x) {
					both("invalid usage." + k + " (want a number)")
				}
			}
		}
	}
	if len(errs) > 0 {
		return refuse("invalid task record: "+strings.Join(logs, ", "), "invalid task record %q: %s", id, strings.Join(errs, ", "))
	}
	return nil
}

// validTaskID: the id names a file tasks/<id>.json, so it cannot leave
// the directory.
func validTaskID(id string) error {
	if id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00") || len(id) > 200 {
		const why = " (it names the file tasks/<id>.json: no slashes, at most 200 bytes)"
		return refuse("invalid id"+why, "invalid id %q"+why, id)
	}
	return nil
}

func isNumber(v json.RawMessage) bool {
	if len(v) == 0 {
		return false
	}
	var f float64
	return json.Unmarshal(v, &f) == nil && !math.IsNaN(f)
}

func valueText(v json.RawMessage) string {
	if v == nil {
		return "(none)"
	}
	if len(v) > 40 {
		return string(v[:40]) + "…"
	}
	return string(v)
}

// number reads a JSON number member of an object; ok false when absent or
// not a number.
func number(v json.RawMessage) (float64, bool) {
	if !isNumber(v) {
		return 0, false
	}
	var f float64
	_ = json.Unmarshal(v, &f)
	return f, true
}

// jsonNumber writes f as JavaScript would (integers without a point).
func jsonNumber(f float64) json.RawMessage {
	b, _ := json.Marshal(f)
	return b
}
