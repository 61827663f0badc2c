package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/wire"
)

// Once a job has ended, each write of its /execute/stream has the write
// timeout, not the rest of the stream: a client that takes every event as
// it comes gets them all, however long the end of the output takes to
// come (the timeout was set once, at the job's end, and cut a client that
// read a large output steadily mid-event: one truncated event, no exit).
// The method table here is the daemon's own control.Server with job.stream
// and job.wait of the test's: the job has ended at once, its pieces come
// one every 150 ms, eight of them, against a timeout of 500 ms.
func TestStreamWriteTimeoutIsPerWrite(t *testing.T) {
	// Last to run: the actors, the servers, the handler's goroutine and
	// the client's connections are gone (protoactor's dead-letter
	// throttle outlives its system, as in every package that starts one).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	ctrl, err := control.New(control.Options{Path: filepath.Join(t.TempDir(), "daemon.sock"), System: sys, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	const pieces = 8
	ctrl.Handle("lane.list", func(call api.Call) {
		call.Respond(map[string]any{"lanes": []map[string]any{{"name": "net"}}})
	})
	ctrl.Handle("job.wait", func(call api.Call) { call.Respond(map[string]any{}) }) // ended
	ctrl.Handle("job.stream", func(call api.Call) {
		sc := call.(api.StreamCall)
		go func() {
			taken := make(chan bool, 1)
			push := func(p wire.StreamPiece) bool {
				sc.Push("job.stream", wire.AppendStreamPiece(nil, &p), func(ok bool) { taken <- ok })
				return <-taken
			}
			if !push(wire.StreamPiece{JobID: "j-1"}) {
				return
			}
			for i := range pieces {
				if i > 0 {
					time.Sleep(150 * time.Millisecond) // the output's end comes slowly
				}
				if !push(wire.StreamPiece{JobID: "j-1", Offset: int64(i), Stream: "stdout", Data: []byte{'a' + byte(i)}}) {
					return
				}
			}
			code := int32(0)
			call.Respond(map[string]any{"job": api.JobRecord{ID: "j-1", State: api.StateSucceeded, ExitCode: &code}})
		}()
	})
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	const key = "0123456789abcdef0123456789abcdef"
	s, err := Start(Options{Config: cfg, APIKey: key, NodeID: "n", Caller: ctrl, Home: t.TempDir(),
		Logger: zerolog.Nop(), Started: time.Now(), StreamWriteTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/api/v1/execute/stream", strings.NewReader(`{"command":"x"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var got []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Type, Data string }
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("event %q: %v", l, err)
		}
		got = append(got, ev.Type+":"+ev.Data)
	}
	want := "stdout:a stdout:b stdout:c stdout:d stdout:e stdout:f stdout:g stdout:h exit:0"
	if strings.Join(got, " ") != want {
		t.Fatalf("events %q (read error %v), want %q", got, sc.Err(), want)
	}
}
