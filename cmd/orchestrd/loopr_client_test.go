package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// looprClient speaks to the daemon as Loopr's real TUI and CLI do
// (scottidler/loopr src/ipc/client.rs): one request at a time with ids from
// 1, and every line read first as a response (a numeric id), then as an
// event {event, data}; events read while waiting for an answer are kept,
// in order.
type looprClient struct {
	t      *testing.T
	nc     net.Conn
	br     *bufio.Reader
	nextID uint64
	events []looprEvent
}

type looprEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type looprResponse struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func dialLoopr(t *testing.T, sock string) *looprClient {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &looprClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20), nextID: 1}
}

// next reads one line: a response, or an event.
func (c *looprClient) next(within time.Duration) (*looprResponse, *looprEvent) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(within))
	line, err := c.br.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("reading from the daemon: %v (partial %q)", err, line)
	}
	// A response first: Loopr's DaemonResponse needs a u64 id.
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(line, &probe); err != nil {
		c.t.Fatalf("line %q is not a JSON object: %v", line, err)
	}
	if _, ok := probe["id"]; ok {
		var r looprResponse
		if err := json.Unmarshal(line, &r); err != nil {
			c.t.Fatalf("line %q has an id but is no response: %v", line, err)
		}
		if _, ev := probe["event"]; ev {
			c.t.Fatalf("line %q is both a response and an event", line)
		}
		return &r, nil
	}
	var e looprEvent
	if err := json.Unmarshal(line, &e); err != nil || e.Event == "" || e.Data == nil || len(probe) != 2 {
		c.t.Fatalf("line %q is neither a response nor an event {event, data}", line)
	}
	return nil, &e
}

// request sends method and reads until its response, keeping the events.
func (c *looprClient) request(method string, params any) *looprResponse {
	c.t.Helper()
	id := c.nextID
	c.nextID++
	b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	c.send(string(b))
	for {
		r, e := c.next(30 * time.Second) // Loopr's client waits 30 s
		if e != nil {
			c.events = append(c.events, *e)
			continue
		}
		if r.ID != id {
			c.t.Fatalf("%s: response for id %d, want %d", method, r.ID, id)
		}
		return r
	}
}

func (c *looprClient) send(line string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

// event returns the next event (those kept first), waiting up to within.
func (c *looprClient) event(within time.Duration) looprEvent {
	c.t.Helper()
	if len(c.events) > 0 {
		e := c.events[0]
		c.events = c.events[1:]
		return e
	}
	for {
		r, e := c.next(within)
		if r != nil {
			c.t.Fatalf("a response %+v nobody asked for", r)
		}
		return *e
	}
}

// Loopr's client against the real daemon: initialize (its version passes,
// another major is refused 1004 with both versions), status, subscribe and
// then Loopr's events in order, bad JSON answered with id 0.
func TestLooprClient(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	d := startDaemon(t, "[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n")
	c := dialLoopr(t, d.sock())

	r := c.request("initialize", map[string]any{"version": "0.1.1"})
	var init struct {
		Version      string          `json:"version"`
		Protocol     string          `json:"protocol"`
		Capabilities map[string]bool `json:"capabilities"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &init) != nil || init.Version != version || init.Protocol != "1.0" ||
		!init.Capabilities["chat"] || !init.Capabilities["loops"] || !init.Capabilities["events"] {
		t.Fatalf("initialize answered %s %+v", r.Result, r.Error)
	}

	// status: no chat pool configured, so the LLM is not ready.
	r = c.request("status", map[string]any{"detail": true}) // members it does not know are ignored
	var st struct {
		Running  bool   `json:"running"`
		Version  string `json:"version"`
		LLMReady *bool  `json:"llm_ready"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &st) != nil || !st.Running || st.Version != version || st.LLMReady == nil || *st.LLMReady {
		t.Fatalf("status answered %s %+v", r.Result, r.Error)
	}

	// No chat pool: chat.send says which key to set, and so does chat.
	r = c.request("chat.send", map[string]any{"message": "hi"})
	if r.Error == nil || r.Error.Code != api.CodeInvalidState || !strings.Contains(r.Error.Message, "[loops] chat_executor") {
		t.Fatalf("chat.send without a pool: %s %+v", r.Result, r.Error)
	}
	if _, errOut, code := runCLIWith(t, "", strings.NewReader("hi\n"), "chat", "--home", d.home); code != exitFailure ||
		!strings.Contains(errOut, "[loops] chat_executor") {
		t.Fatalf("orchestrd chat without a pool: exit %d, stderr %q", code, errOut)
	}

	r = c.request("ping", map[string]any{})
	if r.Error != nil || string(r.Result) != `{"pong":true}` {
		t.Fatalf("ping answered %s", r.Result)
	}

	r = c.request("subscribe", map[string]any{})
	if r.Error != nil || string(r.Result) != `{"subscribed":true}` {
		t.Fatalf("subscribe answered %s %+v", r.Result, r.Error)
	}
	// Loopr's events: plan.* today, through a plan approval (an approval
	// of kind plan asked on the control socket), then its rejection.
	const n = 5
	var ids []string
	for i := 0; i < n; i++ {
		r = c.request("approval.request", map[string]any{"kind": "plan", "content": fmt.Sprintf("# Plan %d", i),
			"specs": []string{"spec-a.md"}})
		var a struct {
			ID string `json:"id"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &a) != nil || a.ID == "" {
			t.Fatalf("approval.request answered %s %+v", r.Result, r.Error)
		}
		ids = append(ids, a.ID)
		r = c.request("plan.reject", map[string]any{"id": a.ID, "reason": "no"})
		if r.Error != nil {
			t.Fatalf("plan.reject: %+v", r.Error)
		}
	}
	// Every event in order: each plan awaiting, then rejected; no kind
	// outside Loopr's (job.*, approval.*, conn.* are not subscribed).
	for i := 0; i < n; i++ {
		for _, want := range []string{"plan.awaiting_approval", "plan.rejected"} {
			e := c.event(20 * time.Second)
			if e.Event != want {
				t.Fatalf("event %s (%s), want %s of plan %d", e.Event, e.Data, want, i)
			}
			var data struct {
				ID      string   `json:"id"`
				Content *string  `json:"content"`
				Specs   []string `json:"specs"`
			}
			if json.Unmarshal(e.Data, &data) != nil || data.ID != ids[i] {
				t.Fatalf("%s data %s, want id %s", e.Event, e.Data, ids[i])
			}
			// Loopr's plan.awaiting_approval carries the plan itself.
			if want == "plan.awaiting_approval" && (data.Content == nil || *data.Content != fmt.Sprintf("# Plan %d", i) ||
				len(data.Specs) != 1 || data.Specs[0] != "spec-a.md") {
				t.Fatalf("%s data %s: want the plan and its specs", e.Event, e.Data)
			}
		}
	}

	// Bad JSON: id 0, -32700; the connection goes on.
	c.send(`{"id": 99, "method": "status"`)
	for {
		resp, e := c.next(10 * time.Second)
		if e != nil {
			continue
		}
		if resp.ID != 0 || resp.Error == nil || resp.Error.Code != api.CodeParseError {
			t.Fatalf("bad JSON answered %+v", resp)
		}
		break
	}
	if r := c.request("ping", nil); r.Error != nil {
		t.Fatalf("ping after bad JSON: %+v", r.Error)
	}

	// A client of another major version: 1004 with both versions.
	c2 := dialLoopr(t, d.sock())
	r = c2.request("initialize", map[string]any{"version": "1.0.0"})
	if r.Error == nil || r.Error.Code != api.CodeVersionMismatch {
		t.Fatalf("initialize 1.0.0 answered %s %+v", r.Result, r.Error)
	}
	var mm struct {
		ClientVersion string `json:"client_version"`
		DaemonVersion string `json:"daemon_version"`
	}
	if json.Unmarshal(r.Error.Data, &mm) != nil || mm.ClientVersion != "1.0.0" || mm.DaemonVersion != version {
		t.Fatalf("1004 data %s", r.Error.Data)
	}
	if !strings.Contains(r.Error.Message, "1.0.0") {
		t.Fatalf("1004 message %q", r.Error.Message)
	}
}

// Loopr's client sees a loop's life as Loopr's TUI does: loop.created and
// loop.updated with the loop record as data, in order, and metrics.update
// settling on the final counts.
func TestLooprClientLoopEvents(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	d := startDaemon(t, loopAgent(t, prompts, `echo done > out.txt`, "auto_merge = true"))
	c := dialLoopr(t, d.sock())
	if r := c.request("initialize", map[string]any{"version": "0.1.1"}); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	if r := c.request("subscribe", nil); r.Error != nil {
		t.Fatalf("subscribe: %+v", r.Error)
	}
	r := c.request("loop.create", map[string]any{"loop_type": "code", "description": "write out.txt", "repo": repo})
	var created api.LoopCreatePlanResult
	if r.Error != nil || json.Unmarshal(r.Result, &created) != nil || created.ID == "" {
		t.Fatalf("loop.create: %s %+v", r.Result, r.Error)
	}
	type loopData struct {
		ID       string          `json:"id"`
		LoopType string          `json:"loop_type"`
		ParentID json.RawMessage `json:"parent_id"`
		Status   string          `json:"status"`
	}
	var statuses []string
	sawCreated, complete, settled := false, false, false
	var seen []string
	defer func() {
		if t.Failed() {
			t.Logf("events seen: %s", strings.Join(seen, "\n"))
		}
	}()
	for !complete || !settled {
		e := c.event(60 * time.Second)
		seen = append(seen, e.Event+" "+string(e.Data))
		switch e.Event {
		case "loop.created", "loop.updated":
			var l loopData
			if err := json.Unmarshal(e.Data, &l); err != nil || l.ID != created.ID || l.LoopType != "code" || string(l.ParentID) != "null" {
				t.Fatalf("%s data %s: not the loop's record (%v)", e.Event, e.Data, err)
			}
			if e.Event == "loop.created" {
				if sawCreated || len(statuses) > 0 {
					t.Fatalf("loop.created after %v", statuses)
				}
				sawCreated = true
			} else if !sawCreated {
				t.Fatalf("loop.updated %s before loop.created", e.Data)
			}
			if complete {
				t.Fatalf("the loop changed after it completed: %s", e.Data)
			}
			statuses = append(statuses, l.Status)
			complete = l.Status == string(api.LoopComplete)
			if l.Status == string(api.LoopFailed) {
				t.Fatalf("the loop failed: %s\n%s", e.Data, tail(d.stderr.String(), 3000))
			}
		case "metrics.update":
			var m struct {
				RunningLoops int            `json:"running_loops"`
				Loops        map[string]int `json:"loops"`
			}
			if err := json.Unmarshal(e.Data, &m); err != nil {
				t.Fatalf("metrics.update data %s: %v", e.Data, err)
			}
			settled = m.RunningLoops == 0 && m.Loops["complete"] == 1
		}
	}
	if statuses[0] != string(api.LoopPending) && statuses[0] != string(api.LoopRunning) {
		t.Fatalf("statuses %v", statuses)
	}
}
