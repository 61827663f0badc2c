package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/internal/reachouthook"
)

// runApprovals: many hooks waiting at once on vibe-reachout's socket, as
// the real hook waits (one line, write side shut, a blocking read). What
// a pending approval costs the daemon (RSS per approval), and the time
// from approval.resolve sent on the control socket to the hook reading
// its answer, one approval resolved at a time.
func runApprovals(b *bench) error {
	n := pick(b, 1000, 100)
	sock := filepath.Join(b.tmp, "reachout.sock")
	d, c, err := b.startDialed("approvals", approvalsConfig(sock))
	if err != nil {
		return err
	}
	defer d.stop()
	defer c.Close()

	// Settle, then the daemon's RSS before any hook.
	time.Sleep(500 * time.Millisecond)
	rss0, err := procRSS(d.pid())
	if err != nil {
		return err
	}

	type hook struct {
		id   string
		conn net.Conn
		read chan time.Time // when the answer line was read
	}
	hooks := make([]*hook, n)
	var wg sync.WaitGroup
	defer func() {
		for _, h := range hooks {
			if h != nil && h.conn != nil {
				h.conn.Close()
			}
		}
		wg.Wait()
	}()
	input := json.RawMessage(`{"command":"git push origin main","description":"Push the branch"}`)
	for i := range hooks {
		req := reachouthook.Request{RequestID: reachouthook.NewRequestID(), ToolName: "Bash", ToolInput: input,
			Cwd: "/home/me/project", SessionID: "bench-session",
			PermissionSuggestions: []json.RawMessage{json.RawMessage(`{"type":"toolAlwaysAllow","tool":"Bash"}`)}}
		line, err := json.Marshal(req)
		if err != nil {
			return err
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return fmt.Errorf("hook %d: %w", i, err)
		}
		h := &hook{id: req.RequestID, conn: conn, read: make(chan time.Time, 1)}
		hooks[i] = h
		if _, err := conn.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("hook %d: sending: %w", i, err)
		}
		if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
			return fmt.Errorf("hook %d: shutting the write side: %w", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := bufio.NewReader(h.conn).ReadString('\n')
			if err == nil && len(got) > 0 {
				h.read <- time.Now()
			}
			close(h.read)
		}()
	}
	// Every hook's approval pending (approval.get by request_id).
	deadline := time.Now().Add(60 * time.Second)
	for {
		var res struct {
			Approvals []struct {
				ID string `json:"id"`
			} `json:"approvals"`
		}
		if err := call(c, "approval.list", map[string]any{}, &res); err != nil {
			return fmt.Errorf("approval.list: %w", err)
		}
		if len(res.Approvals) >= n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d approvals pending after 60 s", len(res.Approvals), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	rss1, err := procRSS(d.pid())
	if err != nil {
		return err
	}
	perApproval := float64(rss1-rss0) / float64(n)

	var ds []time.Duration
	for i, h := range hooks {
		decision := "Allow"
		if i%2 == 1 {
			decision = "Deny"
		}
		t0 := time.Now()
		var res json.RawMessage
		if err := call(c, "approval.resolve", map[string]any{"id": h.id, "decision": decision}, &res); err != nil {
			return fmt.Errorf("approval.resolve %s: %w", h.id, err)
		}
		select {
		case at, ok := <-h.read:
			if !ok {
				return fmt.Errorf("hook %d: closed without an answer", i)
			}
			ds = append(ds, at.Sub(t0))
		case <-time.After(10 * time.Second):
			return fmt.Errorf("hook %d: no answer 10 s after approval.resolve", i)
		}
	}
	st := b.sample("approvals.resolve_to_hook_ms", durationsMs(ds), "ms")
	b.add(Row{Metric: fmt.Sprintf("RSS per pending approval (%d hooks waiting)", n), N: n,
		Orchestrd: fmtBytes(perApproval), Value: perApproval, Unit: "bytes"})
	b.add(Row{Metric: "p50 approval.resolve → hook reads its answer", N: st.N, Orchestrd: fmtMs(st.P50), Value: st.P50, Unit: "ms"})
	b.add(Row{Metric: "p99 approval.resolve → hook reads its answer", N: st.N, Orchestrd: fmtMs(st.P99), Value: st.P99, Unit: "ms",
		Target: "≤ 2 ms", Met: boolp(st.P99 <= 2)})
	return d.stop()
}

// approvalsConfig is the daemon's config for runApprovals: one small lane,
// the hook socket at sock, approvals that outlast the run.
func approvalsConfig(sock string) string {
	return laneConfig{runners: 1, slots: 1}.toml() +
		fmt.Sprintf("\n[approvals]\ntimeout = \"10m\"\n\n[approvals.reachout]\nsocket = %q\n", sock)
}
