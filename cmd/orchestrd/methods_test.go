package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// The control socket serves the methods every owner registered: the
// protocol's own, the lanes' (job.*, lane.list) and the daemon's
// (tree.get, metrics.get, frontend.list); anything else is -32601 as it always was.
func TestMethodsOfEveryOwner(t *testing.T) {
	underRace(t)
	t.Parallel()
	d := startDaemon(t, "[lanes.no-net]\nrunners = 0\nspares = 0\n") // jobs stay queued
	c := d.client()
	call := func(method string, params, result any) error {
		ctx, cancel := context.WithTimeout(context.Background(), testCallTimeout)
		defer cancel()
		return c.Call(ctx, method, params, result)
	}
	must := func(method string, params, result any) {
		t.Helper()
		d.check(call(method, params, result))
	}

	// The lanes' methods.
	var sub struct {
		JobID string `json:"job_id"`
	}
	must("job.submit", api.JobSpec{Argv: []string{"true"}}, &sub)
	var got struct{ Job api.JobRecord }
	must("job.get", map[string]string{"job_id": sub.JobID}, &got)
	if got.Job.ID != sub.JobID || got.Job.Lane != api.DefaultLane || got.Job.State != api.StateQueued {
		t.Fatalf("job.get = %+v", got.Job)
	}
	var list struct{ Jobs []api.JobRecord }
	must("job.list", map[string]string{"state": "queued"}, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != sub.JobID {
		t.Fatalf("job.list = %+v", list.Jobs)
	}
	var lanes struct{ Lanes []api.LaneStatus }
	must("lane.list", nil, &lanes)
	if len(lanes.Lanes) != 1 || lanes.Lanes[0].Name != api.DefaultLane || lanes.Lanes[0].Queued != 1 {
		t.Fatalf("lane.list = %+v", lanes.Lanes)
	}
	err := call("job.wait", map[string]any{"id": sub.JobID, "timeout_ms": 20}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInvalidState || we.Message != "job "+sub.JobID+" is still queued after 20 ms" {
		t.Fatalf("job.wait timeout: %v", err)
	}
	if data, _ := json.Marshal(we.Data); jsonField(t, data, "job", "id") != sub.JobID {
		t.Fatalf("job.wait timeout data %s", data)
	}
	// A wait is answered when its job ends (here: cancelled), on the same
	// connection that cancels it.
	waited := make(chan error, 1)
	var ended struct{ Job api.JobRecord }
	go func() { waited <- call("job.wait", map[string]string{"id": sub.JobID}, &ended) }()
	var cr struct {
		WasRunning bool `json:"was_running"`
	}
	must("job.cancel", map[string]string{"id": sub.JobID}, &cr)
	if cr.WasRunning {
		t.Fatal("job.cancel of a queued job says was_running")
	}
	select {
	case err := <-waited:
		if err != nil || ended.Job.State != api.StateCancelled {
			t.Fatalf("job.wait: %v, %+v", err, ended.Job)
		}
	case <-time.After(testCallTimeout):
		t.Fatal("job.wait not answered after the job ended")
	}

	// The daemon's.
	var tree struct{ Tree []actors.TreeNode }
	must("tree.get", nil, &tree)
	var kinds []string
	for _, n := range tree.Tree {
		kinds = append(kinds, n.Kind)
	}
	if !slices.Contains(kinds, "lanes") || !slices.Contains(kinds, "conns") {
		t.Fatalf("tree.get top actors %v, want lanes and conns", kinds)
	}
	var raw json.RawMessage
	must("metrics.get", nil, &raw)
	if keys := jsonKeys(t, raw); !slices.Equal(keys, []string{"uptime_ms", "jobs_by_state", "jobs_submitted", "runner_restarts",
		"orphaned_jobs", "runners_by_lane", "goroutines", "open_fds", "connections", "connections_seen", "finished_output_bytes",
		"running_loops", "loops_by_status"}) {
		t.Fatalf("metrics.get fields %v", keys)
	}
	var m api.Metrics
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.JobsSubmitted != 1 || m.JobsByState[api.StateCancelled] != 1 || m.Connections < 1 || m.ConnectionsSeen < m.Connections ||
		m.Goroutines <= 0 || m.OpenFDs <= 0 || m.UptimeMs <= 0 || m.RunnersByLane[api.DefaultLane] != 0 {
		t.Fatalf("metrics.get = %s", raw)
	}

	// frontend.list: every way in, the lane of bring-your-own runners too.
	var fe api.FrontEndList
	must("frontend.list", nil, &fe)
	byName := map[string]api.FrontEnd{}
	for _, f := range fe.FrontEnds {
		byName[f.Name] = f
	}
	if byName["control"].Address != d.sock() || byName["lane no-net"].Address != filepath.Join(d.home, "runner-no-net.sock") ||
		byName["hook"].Name != "hook" || byName["http"].Name != "http" || byName["ui"].Name != "ui" {
		t.Fatalf("frontend.list = %+v", fe.FrontEnds)
	}

	for _, m := range []string{"tree.get", "metrics.get", "lane.list", "frontend.list"} {
		err := call(m, map[string]int{"x": 1}, nil)
		if !errors.As(err, &we) || we.Code != wire.CodeInvalidParams || we.Message != "invalid params for "+m+`: json: unknown field "x"` {
			t.Fatalf("%s with a param: %v", m, err)
		}
	}

	// Nobody's: the line is the one it always was.
	nc, err := net.Dial("unix", d.sock())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testCallTimeout))
	if _, err := nc.Write([]byte(`{"id":5,"method":"no.such"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	if want := `{"id":5,"error":{"code":-32601,"message":"method not found: no.such"}}` + "\n"; err != nil || line != want {
		t.Fatalf("unknown method answered %q (%v), want %q", line, err, want)
	}
}

// jsonKeys lists the keys of a JSON object in the order they come.
func jsonKeys(t *testing.T, obj []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(obj))
	var keys []string
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// jsonField is the string at path in a JSON object ("" if absent).
func jsonField(t *testing.T, obj []byte, path ...string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(obj, &v); err != nil {
		t.Fatalf("%s: %v", obj, err)
	}
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}
