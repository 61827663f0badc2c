// Command testexecutor is a scripted Agor-style executor for orchestrd's
// tests and benchmarks. It listens on --socket, takes the daemon's one
// connection and speaks JSON-RPC 2.0 on it, one object per line. Each
// execute_prompt's prompt is a script:
//
//	{"steps":[{"op":"message","n":3,"text":"hi"},{"op":"status","status":"completed"}]}
//
// Ops: message {n, type, text, data}, flood {n}, progress {percent,
// message}, error {code, message}, key {service} (reports key_result with
// a hash of the key, never the key), permission {tool, input} (reports
// permission_result), context (reports context_result), bad_token {method}
// (reports bad_token_result), probe {path} (reports probe_result: connected,
// read or error), net {path: "host:port"} (reports net_result), raw {line}, sleep {ms}, hang (until stopped
// or cancelled), crash {signal}, usage {input, output, cache_read_tokens,
// cost_usd}, status {status, code, message, retry_in_ms: error.retry_at
// that far ahead}, conversation (a built-in agent kind's messages, as an
// adapter reports them: see conversation), and a built-in agent kind's
// result: sdk {text: the result's sdk_session_id, default sdk-TASK},
// echo_sdk (reports sdk_echo with the sdk_session_id execute_prompt gave),
// denied {n, tool} (n permission_denied messages, the result's denied). A
// prompt that is not a script runs --script's next script, else is echoed
// as one
// content_block_delta.
//
// spawn_terminal starts the shell asked for on a real PTY and passes the
// master with SCM_RIGHTS on the response; --terminal refuse (an error),
// nofd (a response without the descriptor) or notpty (a pipe instead)
// misbehave.
//
// Flags: --ignore-pause (keep sending while paused), --hang-on-shutdown,
// --no-listen (never listen: a startup timeout), --pidfile PATH, --log
// PATH (one line per method received from the daemon), --script FILE (a
// JSON array of scripts, {"steps": [...]} each, run in turn for prompts
// that are not scripts, the last one again: a loop's agent).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/executors/ptyfd"
)

type rpc struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type step struct {
	Op      string          `json:"op"`
	N       int             `json:"n"`
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Size    int             `json:"size"` // message: the text is this many x's
	Data    json.RawMessage `json:"data"`
	Percent int             `json:"percent"`
	Message string          `json:"message"`
	Code    string          `json:"code"`
	Service string          `json:"service"`
	Tool    string          `json:"tool"`
	Input   json.RawMessage `json:"input"`
	Method  string          `json:"method"`
	Line    string          `json:"line"`
	Path    string          `json:"path"`
	Ms      int             `json:"ms"`
	Signal  int             `json:"signal"`
	Status  string          `json:"status"`
	In      int64           `json:"input_tokens"`
	Out     int64           `json:"output_tokens"`
	Cache   int64           `json:"cache_read_tokens"`
	Cost    float64         `json:"cost_usd"`
	RetryMs int64           `json:"retry_in_ms"`
}

type executor struct {
	conn        net.Conn
	wmu         sync.Mutex
	ignorePause bool
	logf        *os.File

	mu      sync.Mutex
	cond    *sync.Cond
	paused  bool
	nextID  int
	waits   map[string]chan rpc
	cancels map[string]context.CancelFunc
	// scripts (--script) run in turn for prompts that are not scripts,
	// the last one again once each ran; prompts counts those prompts.
	scripts [][]step
	prompts int
}

func main() {
	fs := flag.NewFlagSet("testexecutor", flag.ExitOnError)
	socket := fs.String("socket", "", "socket path to listen on")
	fdN := fs.Int("fd", -1, "the daemon's connection is this descriptor (a socketpair's end)")
	ignorePause := fs.Bool("ignore-pause", false, "keep sending while paused")
	hangOnShutdown := fs.Bool("hang-on-shutdown", false, "answer nothing to shutdown and keep running")
	noListen := fs.Bool("no-listen", false, "never listen")
	pidfile := fs.String("pidfile", "", "write the pid here")
	logPath := fs.String("log", "", "append one line per method received")
	termMode := fs.String("terminal", "ok", "spawn_terminal: ok, refuse, nofd or notpty")
	strict := fs.Bool("strict-lines", false, "exit 3 on an empty line from the daemon (a strict NDJSON parser)")
	scriptFile := fs.String("script", "", "a JSON array of scripts ({\"steps\": [...]}) run in turn for prompts that are not scripts")
	_ = fs.Parse(os.Args[1:])
	var scripts [][]step
	if *scriptFile != "" {
		b, err := os.ReadFile(*scriptFile)
		var ss []struct {
			Steps []step `json:"steps"`
		}
		if err == nil {
			err = json.Unmarshal(b, &ss)
		}
		if err != nil || len(ss) == 0 {
			fmt.Fprintln(os.Stderr, "testexecutor: --script:", err)
			os.Exit(2)
		}
		for _, x := range ss {
			scripts = append(scripts, x.Steps)
		}
	}
	if *pidfile != "" {
		_ = os.WriteFile(*pidfile, []byte(strconv.Itoa(os.Getpid())), 0o600)
	}
	if *socket == "" && *fdN < 0 {
		fmt.Fprintln(os.Stderr, "testexecutor: --socket or --fd is required")
		os.Exit(2)
	}
	if *noListen {
		select {}
	}
	var c net.Conn
	if *fdN >= 0 {
		f := os.NewFile(uintptr(*fdN), "daemon")
		fc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testexecutor:", err)
			os.Exit(1)
		}
		c = fc
	} else {
		_ = os.Remove(*socket)
		ln, err := net.Listen("unix", *socket)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testexecutor:", err)
			os.Exit(1)
		}
		if c, err = ln.Accept(); err != nil {
			fmt.Fprintln(os.Stderr, "testexecutor:", err)
			os.Exit(1)
		}
		ln.Close()
	}
	e := &executor{conn: c, ignorePause: *ignorePause, waits: map[string]chan rpc{}, cancels: map[string]context.CancelFunc{},
		scripts: scripts}
	e.cond = sync.NewCond(&e.mu)
	if *logPath != "" {
		e.logf, _ = os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if *strict && len(sc.Bytes()) == 0 {
			fmt.Fprintln(os.Stderr, "testexecutor: an empty line from the daemon")
			os.Exit(3)
		}
		var m rpc
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Method != "" && e.logf != nil {
			fmt.Fprintln(e.logf, m.Method)
		}
		switch {
		case m.Method == "" && len(m.ID) > 0:
			e.mu.Lock()
			ch := e.waits[string(m.ID)]
			delete(e.waits, string(m.ID))
			e.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case m.Method == "execute_prompt":
			go e.execute(m)
		case m.Method == "spawn_terminal":
			e.spawnTerminal(m, *termMode)
		case m.Method == "stop_task" || m.Method == "cancel_task":
			var p struct {
				TaskID string `json:"task_id"`
			}
			_ = json.Unmarshal(m.Params, &p)
			e.mu.Lock()
			cancel := e.cancels[p.TaskID]
			e.mu.Unlock()
			if cancel != nil {
				cancel()
			}
			if len(m.ID) > 0 {
				e.reply(m.ID, map[string]any{"stopped": cancel != nil})
			}
		case m.Method == "shutdown":
			if *hangOnShutdown {
				continue
			}
			e.reply(m.ID, map[string]any{"status": "idle"})
			os.Exit(0)
		case m.Method == "pause_notifications":
			e.mu.Lock()
			e.paused = true
			e.mu.Unlock()
		case m.Method == "resume_notifications":
			e.mu.Lock()
			e.paused = false
			e.mu.Unlock()
			e.cond.Broadcast()
		case len(m.ID) > 0:
			e.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": rpcError{-32601, "method not found: " + m.Method}})
		}
	}
	os.Exit(0)
}

// spawnTerminal answers spawn_terminal, passing the PTY's master.
func (e *executor) spawnTerminal(m rpc, mode string) {
	var p struct {
		Cwd   string            `json:"cwd"`
		Shell string            `json:"shell"`
		Env   map[string]string `json:"env"`
		Cols  int               `json:"cols"`
		Rows  int               `json:"rows"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if mode == "refuse" {
		e.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": rpcError{-32000, "terminals are disabled here"}})
		return
	}
	env := os.Environ()
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	master, cmd, err := ptyfd.Start(p.Shell, p.Cwd, env, p.Cols, p.Rows)
	if err != nil {
		e.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": rpcError{-32000, err.Error()}})
		return
	}
	go func() { _ = cmd.Wait() }()
	defer master.Close()
	line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID,
		"result": map[string]any{"terminal_id": fmt.Sprintf("pty-%d", cmd.Process.Pid), "pty_pid": cmd.Process.Pid}})
	line = append(line, '\n')
	e.wmu.Lock()
	defer e.wmu.Unlock()
	switch mode {
	case "nofd":
		_, _ = e.conn.Write(line)
	case "notpty":
		r, w, _ := os.Pipe()
		defer r.Close()
		defer w.Close()
		_ = ptyfd.SendFD(e.conn.(*net.UnixConn), line, r)
	default:
		_ = ptyfd.SendFD(e.conn.(*net.UnixConn), line, master)
	}
}

func (e *executor) write(v any) {
	b, _ := json.Marshal(v)
	e.writeLine(b)
}

func (e *executor) writeLine(b []byte) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	_, _ = e.conn.Write(append(b, '\n'))
}

func (e *executor) reply(id json.RawMessage, result any) {
	e.write(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (e *executor) notify(method string, params any) {
	if !e.ignorePause {
		e.mu.Lock()
		for e.paused {
			e.cond.Wait()
		}
		e.mu.Unlock()
	}
	e.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// call sends a request and waits for its response.
func (e *executor) call(method string, params any) rpc {
	e.mu.Lock()
	e.nextID++
	id := strconv.Quote("e-" + strconv.Itoa(e.nextID))
	ch := make(chan rpc, 1)
	e.waits[id] = ch
	e.mu.Unlock()
	e.write(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	return <-ch
}

type task struct {
	e     *executor
	id    string
	token string
	seq   int64
	n     int
}

func (t *task) report(typ string, data any) {
	t.seq++
	t.n++
	t.e.notify("report_message", map[string]any{"session_token": t.token, "task_id": t.id, "sequence": t.seq,
		"timestamp": time.Now().UnixMilli(), "event_type": typ, "event_data": data})
}

// flood sends n report_message notifications as a busy agent's executor
// would: lines built without reflection and written in batches of up to
// 32 KiB (as a Node stream coalesces its writes), the batch flushed and
// the sending held while the daemon has paused notifications (unless
// --ignore-pause).
func (t *task) flood(n int) {
	e := t.e
	buf := make([]byte, 0, 40<<10)
	flush := func() {
		if len(buf) > 0 {
			e.wmu.Lock()
			_, _ = e.conn.Write(buf)
			e.wmu.Unlock()
			buf = buf[:0]
		}
	}
	for i := 0; i < n; i++ {
		if !e.ignorePause {
			e.mu.Lock()
			paused := e.paused
			e.mu.Unlock()
			if paused {
				flush()
				e.mu.Lock()
				for e.paused {
					e.cond.Wait()
				}
				e.mu.Unlock()
			}
		}
		t.seq++
		t.n++
		buf = append(buf, `{"jsonrpc":"2.0","method":"report_message","params":{"session_token":`...)
		buf = strconv.AppendQuote(buf, t.token)
		buf = append(buf, `,"task_id":`...)
		buf = strconv.AppendQuote(buf, t.id)
		buf = append(buf, `,"sequence":`...)
		buf = strconv.AppendInt(buf, t.seq, 10)
		buf = append(buf, `,"timestamp":`...)
		buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
		buf = append(buf, `,"event_type":"content_block_delta","event_data":{"delta":{"text":"chunk `...)
		buf = strconv.AppendInt(buf, int64(i+1), 10)
		// The same text as orchbench's baseline (internal/flood) sends.
		buf = append(buf, " of the agent's streamed answer\"}}}}\n"...)
		if len(buf) >= 32<<10 {
			flush()
		}
	}
	flush()
}

func (e *executor) execute(m rpc) {
	var p struct {
		SessionToken string `json:"session_token"`
		TaskID       string `json:"task_id"`
		Prompt       string `json:"prompt"`
		SDKSessionID string `json:"sdk_session_id"`
	}
	_ = json.Unmarshal(m.Params, &p)
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	e.cancels[p.TaskID] = cancel
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.cancels, p.TaskID)
		e.mu.Unlock()
		cancel()
	}()
	t := &task{e: e, id: p.TaskID, token: p.SessionToken}
	var script struct {
		Steps []step `json:"steps"`
	}
	if (json.Unmarshal([]byte(p.Prompt), &script) != nil || len(script.Steps) == 0) && len(e.scripts) > 0 {
		e.mu.Lock()
		script.Steps = e.scripts[min(e.prompts, len(e.scripts)-1)]
		e.prompts++
		e.mu.Unlock()
	}
	if len(script.Steps) == 0 {
		t.report("content_block_delta", map[string]any{"delta": map[string]string{"text": p.Prompt}})
		e.reply(m.ID, map[string]any{"status": "completed", "message_count": t.n})
		return
	}
	result := map[string]any{"status": "completed"}
	for _, s := range script.Steps {
		switch s.Op {
		case "message":
			for i := 0; i < max(s.N, 1); i++ {
				typ := s.Type
				if typ == "" {
					typ = "content_block_delta"
				}
				text := s.Text
				if s.Size > 0 {
					text = strings.Repeat("x", s.Size)
				}
				var data any = map[string]any{"delta": map[string]string{"text": text}}
				if len(s.Data) > 0 {
					data = s.Data
				}
				t.report(typ, data)
			}
		case "conversation":
			for _, m := range conversation {
				t.report(m[0], json.RawMessage(m[1]))
			}
		case "gaps":
			// n messages whose sequences leave a gap before each: 2, 4, 6...
			for i := 0; i < max(s.N, 1); i++ {
				t.seq++
				t.report("content_block_delta", map[string]any{"delta": map[string]string{"text": "gap"}})
			}
		case "flood":
			t.flood(s.N)
		case "progress":
			e.notify("report_progress", map[string]any{"session_token": t.token, "task_id": t.id,
				"progress": map[string]any{"percent": s.Percent, "message": s.Message}})
		case "error":
			e.notify("report_error", map[string]any{"session_token": t.token, "task_id": t.id,
				"error": map[string]any{"code": s.Code, "message": s.Message}})
		case "key":
			r := e.call("get_api_key", map[string]any{"session_token": t.token, "service": s.Service})
			out := map[string]any{"ok": r.Error == nil}
			if r.Error != nil {
				out["error"] = r.Error.Message
				out["code"] = r.Error.Code
			} else {
				var k struct {
					APIKey    string `json:"api_key"`
					ExpiresAt int64  `json:"expires_at"`
				}
				_ = json.Unmarshal(r.Result, &k)
				sum := sha256.Sum256([]byte(k.APIKey))
				out["sha256"] = hex.EncodeToString(sum[:])[:12]
				if k.ExpiresAt != 0 {
					out["expires_at"] = k.ExpiresAt
				}
			}
			t.report("key_result", out)
		case "permission":
			r := e.call("request_permission", map[string]any{"session_token": t.token, "tool_name": s.Tool, "tool_input": s.Input})
			out := map[string]any{}
			if r.Error != nil {
				out["error"] = r.Error.Message
			} else {
				_ = json.Unmarshal(r.Result, &out)
			}
			t.report("permission_result", out)
		case "context":
			r := e.call("get_execution_context", map[string]any{"session_token": t.token})
			var c struct {
				Messages     []json.RawMessage `json:"messages"`
				MCPServers   []json.RawMessage `json:"mcp_servers"`
				ContextFiles []string          `json:"context_files"`
			}
			_ = json.Unmarshal(r.Result, &c)
			t.report("context_result", map[string]any{"messages": len(c.Messages), "mcp_servers": len(c.MCPServers),
				"context_files": c.ContextFiles})
		case "bad_token":
			method := s.Method
			if method == "" {
				method = "get_api_key"
			}
			r := e.call(method, map[string]any{"session_token": "not-the-token", "service": "anthropic",
				"tool_name": "Bash", "tool_input": map[string]any{}})
			out := map[string]any{}
			if r.Error != nil {
				out["code"], out["message"] = r.Error.Code, r.Error.Message
			}
			t.report("bad_token_result", out)
		case "net":
			// Can this executor open a TCP connection to path (host:port)?
			out := map[string]any{"addr": s.Path}
			if c, err := net.DialTimeout("tcp", s.Path, 2*time.Second); err == nil {
				c.Close()
				out["connected"] = true
			} else {
				out["error"] = err.Error()
			}
			t.report("net_result", out)
		case "probe":
			// Can this executor reach path? (A sandboxed one must not
			// reach the daemon's home.)
			out := map[string]any{"path": s.Path}
			if c, err := net.Dial("unix", s.Path); err == nil {
				c.Close()
				out["connected"] = true
			} else if b, err := os.ReadFile(s.Path); err == nil {
				out["read"] = len(b)
			} else {
				out["error"] = err.Error()
			}
			t.report("probe_result", out)
		case "raw":
			e.writeLine([]byte(s.Line))
		case "bigline": // a line of size bytes (no JSON), as a runaway agent writes
			e.writeLine(bytes.Repeat([]byte("x"), s.Size))
		case "sleep":
			select {
			case <-time.After(time.Duration(s.Ms) * time.Millisecond):
			case <-ctx.Done():
			}
		case "hang":
			<-ctx.Done()
			result["status"] = "cancelled"
		case "crash":
			if s.Signal != 0 {
				_ = syscall.Kill(os.Getpid(), syscall.Signal(s.Signal))
			}
			os.Exit(3)
		case "usage":
			u := map[string]any{"input_tokens": s.In, "output_tokens": s.Out}
			if s.Cache != 0 {
				u["cache_read_tokens"] = s.Cache
			}
			if s.Cost != 0 {
				u["cost_usd"] = s.Cost
			}
			result["token_usage"] = u
		case "sdk":
			// The agent's own session: text, else one made from the task.
			id := s.Text
			if id == "" {
				id = "sdk-" + p.TaskID
			}
			result["sdk_session_id"] = id
		case "echo_sdk":
			// The agent session the daemon asked it to resume.
			t.report("sdk_echo", map[string]any{"sdk_session_id": p.SDKSessionID})
		case "denied":
			// n tool uses refused, as a built-in agent kind reports them.
			for i := 0; i < max(s.N, 1); i++ {
				t.report("permission_denied", map[string]any{"id": fmt.Sprintf("tool-%d", i+1), "name": s.Tool,
					"input": map[string]any{}, "reason": "denied by the test"})
			}
			result["denied"] = max(s.N, 1)
		case "status":
			result["status"] = s.Status
			if s.Code != "" || s.Message != "" {
				te := map[string]any{"code": s.Code, "message": s.Message}
				if s.RetryMs != 0 {
					te["retry_at"] = time.Now().Add(time.Duration(s.RetryMs) * time.Millisecond).UTC().Format(time.RFC3339)
				}
				result["error"] = te
			}
		}
		if ctx.Err() != nil {
			result["status"] = "cancelled"
			break
		}
	}
	result["message_count"] = t.n
	e.reply(m.ID, result)
}

// conversation is a run of a built-in agent kind's messages (api/agentmsg.go),
// as an adapter reports them, each with the agent's line it came from in
// raw: thinking, text streamed in pieces, a tool call that ran, one denied
// (permission_denied), one the agent refused itself (a tool_result that is
// an error), usage and the result. The text carries markup and a terminal
// escape, as hostile text may.
var conversation = [][2]string{
	{"thinking", `{"text":"Let me look.","raw":{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":"Let me look."}}}}`},
	{"text", `{"text":"I'll list ","raw":{"type":"stream_event","n":1}}`},
	{"text", `{"text":"the files.","raw":{"type":"stream_event","n":2}}`},
	{"tool_call", `{"id":"tu1","name":"Bash","input":{"command":"ls -la"},"raw":{"type":"assistant","n":3}}`},
	{"tool_result", `{"id":"tu1","output":"a.go\nb.go","raw":{"type":"user","n":4}}`},
	{"tool_call", `{"id":"tu2","name":"Bash","input":{"command":"rm -rf build"},"raw":{"type":"assistant","n":5}}`},
	{"permission_denied", `{"id":"tu2","name":"Bash","input":{"command":"rm -rf build"},"reason":"not the build dir","raw":{"type":"control_request","n":6}}`},
	{"tool_call", `{"id":"tu3","name":"Write","input":{"file_path":"/etc/motd","content":"x"},"raw":{"type":"assistant","n":7}}`},
	{"tool_result", `{"id":"tu3","output":"Claude requested permissions to write to /etc/motd, but you haven't granted it yet.","is_error":true,"raw":{"type":"user","n":8}}`},
	{"text", `{"text":"Done <b>bold</b> \u001b[31mred","raw":{"type":"stream_event","n":9}}`},
	{"usage", `{"input_tokens":120,"output_tokens":30,"cost_usd":0.0042,"raw":{"type":"stream_event","n":10}}`},
	{"result", `{"text":"Done.","denied":1,"turns":2,"sdk_session_id":"sdk-1","usage":{"input_tokens":120,"output_tokens":30,"cost_usd":0.0042},"raw":{"type":"result","n":11}}`},
}
