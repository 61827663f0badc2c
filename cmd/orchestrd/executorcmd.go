package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/agent"
	"github.com/orchestrd/orchestrd/executors/ptyfd"
	"github.com/orchestrd/orchestrd/wire"
)

const executorUsage = `orchestrd executor [--agent KIND] [--state-dir DIR] [--model M] [--sandboxed]
                   [--key-env VAR [--key-service S]] [--stop-grace D] -- [CMD [ARGS...]]

An Agor-style executor that runs a command-line agent, one process per
prompt. The daemon starts it (an [executors.NAME] pool) and appends
--socket PATH, or --fd 3 (transport = "fd": its end of a socketpair).

--agent says how the agent is spoken to: "command" (the default) runs CMD
ARGS in the task's directory with the prompt in place of an argument
{prompt}, else on its stdin; its stdout lines are the task's messages (a
JSON line with a "type" passes through as it is, a plain line is text),
its stderr lines reported errors, its exit code the task's status.
--key-env fetches an API key from the daemon for each prompt and gives it
to that one process as VAR. "claude-code", "codex" and "gemini" run that
CLI (CMD: its binary and extra arguments, default the kind's name on
PATH) in its structured mode: its text streams as it is generated, its
tool calls ask the daemon for permission (the approval inbox), its
session is resumed by the next prompt of the same session, its key comes
from the daemon, and a rate limit or a refused key is told apart
(usage_limit, auth_failed). --state-dir is where the agent keeps its
sessions (default: the agent's own, such as ~/.claude).

A prompt that is an iteration of a loop gives the agent ORCHESTRD_LOOP_ID,
ORCHESTRD_LOOP_TYPE, ORCHESTRD_LOOP_ITERATION and ORCHESTRD_LOOP_ARTIFACT
(where to write the loop's artifact, relative to its directory).
spawn_terminal starts the shell asked for (default $SHELL, else /bin/sh)
on a new PTY and passes the PTY to the daemon ('orchestrd terminal').`

func cmdExecutor(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("executor")
	keyEnv := fs.String("key-env", "", "fetch an API key for each prompt and give it to the agent as environment variable `VAR`")
	keyService := fs.String("key-service", "", "the `SERVICE` of the key (default: VAR itself, such as ANTHROPIC_API_KEY)")
	grace := fs.Duration("stop-grace", 5*time.Second, "on stop_task, SIGINT then SIGKILL after `D`")
	kind := fs.String("agent", agent.KindCommand, "the agent `KIND`: "+strings.Join(agent.Known(), ", "))
	stateDir := fs.String("state-dir", "", "where the agent keeps its sessions and settings (`DIR`; default: its own)")
	model := fs.String("model", "", "the `MODEL` the agent uses (default: its own)")
	sandboxed := fs.Bool("sandboxed", false, "the daemon runs this executor in its sandbox (it says so)")
	socket := fs.String("socket", "", "the socket `PATH` to listen on (the daemon gives it)")
	fd := fs.Int("fd", -1, "the daemon's connection is descriptor `N` (the daemon gives it)")
	if code, ok := parseFlags(fs, executorUsage, args, stdout, stderr); !ok {
		return code
	}
	argv := fs.Args()
	// The daemon appends --socket PATH or --fd N after the agent's command.
	if n := len(argv); n >= 2 && argv[n-2] == "--socket" {
		*socket, argv = argv[n-1], argv[:n-2]
	} else if n >= 2 && argv[n-2] == "--fd" {
		v, err := strconv.Atoi(argv[n-1])
		if err != nil || v < 3 {
			return usageError(fs, executorUsage, stderr, "--fd takes a descriptor number of 3 or more, got %q", argv[n-1])
		}
		*fd, argv = v, argv[:n-2]
	}
	if *socket == "" && *fd < 0 {
		*socket = os.Getenv("ORCHESTRD_EXECUTOR_SOCKET")
	}
	if len(argv) == 0 && (*kind == agent.KindCommand || *kind == "") {
		return usageError(fs, executorUsage, stderr, "no agent command given after --")
	}
	if *socket == "" && *fd < 0 {
		return usageError(fs, executorUsage, stderr, "no --socket PATH or --fd N (the daemon appends one)")
	}
	ad, err := agent.New(*kind, agent.Options{Argv: argv, StateDir: *stateDir, Model: *model, Sandboxed: *sandboxed, KeyEnv: *keyEnv, KeyService: *keyService})
	if err != nil {
		return usageError(fs, executorUsage, stderr, "%v", err)
	}
	conn, err := daemonConn(*socket, *fd)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd executor: %v\n", err)
		return exitFailure
	}
	x := &cliExecutor{conn: conn, adapter: ad, grace: *grace,
		calls: map[string]chan wire.RPCMessage{}, tasks: map[string]*agent.Proc{}, terms: map[int]*exec.Cmd{}, stderr: stderr}
	x.cond = sync.NewCond(&x.mu)
	return x.serve()
}

// daemonConn is the executor's connection with the daemon: the socketpair
// end it inherited as descriptor fd, or the first connection on a socket
// it listens on at path.
func daemonConn(path string, fd int) (net.Conn, error) {
	if fd >= 0 {
		f := os.NewFile(uintptr(fd), "daemon")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, fmt.Errorf("taking descriptor %d as the daemon's connection: %w", fd, err)
		}
		return c, nil
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accepting the daemon: %w", err)
	}
	return c, nil
}

// cliExecutor is orchestrd executor's one connection with the daemon.
type cliExecutor struct {
	conn    net.Conn
	adapter agent.Adapter
	grace   time.Duration
	stderr  io.Writer

	wmu sync.Mutex // one line at a time on the socket

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	nextID int
	calls  map[string]chan wire.RPCMessage
	tasks  map[string]*agent.Proc
	terms  map[int]*exec.Cmd // shells on PTYs, by pid
	wg     sync.WaitGroup
}

func (x *cliExecutor) serve() int {
	lr := wire.NewRPCLineReader(x.conn, 0)
	for {
		line, err := lr.Next()
		if err != nil {
			// The daemon went away: what runs is killed, and what waits
			// for an answer hears that none will come.
			x.killAll(syscall.SIGKILL)
			x.mu.Lock()
			for id, ch := range x.calls {
				close(ch)
				delete(x.calls, id)
			}
			x.mu.Unlock()
			x.killTerminals()
			x.wg.Wait()
			if errors.Is(err, io.EOF) {
				return exitOK
			}
			fmt.Fprintf(x.stderr, "orchestrd executor: reading from the daemon: %v\n", err)
			return exitFailure
		}
		if len(line) == 0 {
			continue
		}
		m, bad := wire.ParseRPC(line)
		if bad != nil {
			if !bad.Response {
				x.writeErr(bad.ID, &bad.RPCError)
			}
			continue
		}
		switch m.Kind {
		case wire.RPCKindResult, wire.RPCKindError:
			x.mu.Lock()
			ch := x.calls[m.ID.String()]
			delete(x.calls, m.ID.String())
			x.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		switch m.Method {
		case "execute_prompt":
			x.wg.Add(1)
			go func() {
				defer x.wg.Done()
				x.execute(m)
			}()
		case "spawn_terminal":
			x.spawnTerminal(m)
		case "stop_task", "cancel_task":
			var p struct {
				TaskID string `json:"task_id"`
			}
			_ = json.Unmarshal(m.Params, &p)
			x.mu.Lock()
			t := x.tasks[p.TaskID]
			x.mu.Unlock()
			if t != nil {
				if m.Method == "cancel_task" {
					t.Kill()
				} else {
					t.Stop(x.grace)
				}
			}
			if m.Kind == wire.RPCKindRequest {
				x.reply(m.ID, map[string]any{"stopped": t != nil})
			}
		case "shutdown":
			var p struct {
				TimeoutMs int64 `json:"timeout_ms"`
			}
			_ = json.Unmarshal(m.Params, &p)
			x.mu.Lock()
			running := len(x.tasks)
			x.mu.Unlock()
			status := "idle"
			if running > 0 {
				status = "interrupted"
				x.killAll(syscall.SIGINT)
				done := make(chan struct{})
				go func() { x.wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(time.Duration(p.TimeoutMs) * time.Millisecond / 2):
					x.killAll(syscall.SIGKILL)
				}
			}
			x.reply(m.ID, map[string]any{"status": status})
			x.killTerminals()
			x.wg.Wait()
			x.conn.Close()
			return exitOK
		case "pause_notifications", "resume_notifications":
			x.mu.Lock()
			x.paused = m.Method == "pause_notifications"
			x.mu.Unlock()
			x.cond.Broadcast()
		default:
			if m.Kind == wire.RPCKindRequest {
				x.writeErr(m.ID, wire.RPCErrorf(wire.CodeMethodNotFound, "method not found: %s", m.Method))
			}
		}
	}
}

// spawnTerminal starts a shell on a new PTY and passes its master to the
// daemon with the response (SCM_RIGHTS); the daemon owns it from then on.
func (x *cliExecutor) spawnTerminal(m wire.RPCMessage) {
	var p struct {
		SessionToken string            `json:"session_token"`
		Cwd          string            `json:"cwd"`
		Shell        string            `json:"shell"`
		Env          map[string]string `json:"env"`
		UseTmux      bool              `json:"use_tmux"`
		Cols         int               `json:"cols"`
		Rows         int               `json:"rows"`
	}
	if e := wire.DecodeRPCParams(m, &p); e != nil {
		x.writeErr(m.ID, e)
		return
	}
	uc, ok := x.conn.(*net.UnixConn)
	if !ok {
		x.writeErr(m.ID, wire.RPCErrorf(wire.CodeInternal, "spawn_terminal: the connection cannot pass a file descriptor"))
		return
	}
	shell := p.Shell
	if shell == "" {
		shell = os.Getenv("SHELL")
	}
	env := os.Environ()
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		env = append(env, k+"="+p.Env[k])
	}
	master, cmd, err := ptyfd.Start(shell, p.Cwd, env, p.Cols, p.Rows)
	if err != nil {
		x.writeErr(m.ID, wire.RPCErrorf(wire.CodeInternal, "spawn_terminal: %v", err))
		return
	}
	defer master.Close()
	pid := cmd.Process.Pid
	x.mu.Lock()
	x.terms[pid] = cmd
	x.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		x.mu.Lock()
		delete(x.terms, pid)
		x.mu.Unlock()
	}()
	b, err := wire.AppendRPCResult(nil, m.ID, map[string]any{"terminal_id": fmt.Sprintf("pty-%d", pid), "pty_pid": pid})
	if err != nil {
		x.writeErr(m.ID, wire.RPCErrorf(wire.CodeInternal, "encoding the result: %v", err))
		return
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if err := ptyfd.SendFD(uc, b, master); err != nil {
		fmt.Fprintf(x.stderr, "orchestrd executor: passing the terminal to the daemon: %v\n", err)
	}
}

// killTerminals hangs up the shells on PTYs (their sessions' groups).
func (x *cliExecutor) killTerminals() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for pid := range x.terms {
		_ = syscall.Kill(-pid, syscall.SIGHUP)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

func (x *cliExecutor) killAll(sig syscall.Signal) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range x.tasks {
		t.Signal(sig)
	}
}

// writeLine writes one line (b ends with its newline, as wire's Append*
// make it).
func (x *cliExecutor) writeLine(b []byte) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	_, _ = x.conn.Write(b)
}

func (x *cliExecutor) reply(id wire.RPCID, result any) {
	b, err := wire.AppendRPCResult(nil, id, result)
	if err != nil {
		x.writeErr(id, wire.RPCErrorf(wire.CodeInternal, "encoding the result: %v", err))
		return
	}
	x.writeLine(b)
}

func (x *cliExecutor) writeErr(id wire.RPCID, e *wire.RPCError) {
	b, _ := wire.AppendRPCError(nil, id, e)
	x.writeLine(b)
}

// notify sends a notification, waiting while the daemon has paused them.
func (x *cliExecutor) notify(method string, params any) {
	x.mu.Lock()
	for x.paused {
		x.cond.Wait()
	}
	x.mu.Unlock()
	b, err := wire.AppendRPCNotification(nil, method, params)
	if err == nil {
		x.writeLine(b)
	}
}

// call sends a request and waits for its response, 2 minutes at most.
func (x *cliExecutor) call(method string, params any) (wire.RPCMessage, error) {
	return x.callWait(method, params, 2*time.Minute)
}

// callWait sends a request and waits for its response, at most max (0:
// until the daemon answers or the connection ends; the daemon bounds a
// permission by the pool's permission_timeout).
func (x *cliExecutor) callWait(method string, params any, max time.Duration) (wire.RPCMessage, error) {
	x.mu.Lock()
	x.nextID++
	id := wire.RPCStringID(fmt.Sprintf("e-%d", x.nextID))
	ch := make(chan wire.RPCMessage, 1)
	x.calls[id.String()] = ch
	x.mu.Unlock()
	b, err := wire.AppendRPCRequest(nil, id, method, params)
	if err != nil {
		return wire.RPCMessage{}, err
	}
	x.writeLine(b)
	var timeout <-chan time.Time
	if max > 0 {
		t := time.NewTimer(max)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return wire.RPCMessage{}, fmt.Errorf("%s: the connection with the daemon ended", method)
		}
		if m.Error != nil {
			return m, m.Error
		}
		return m, nil
	case <-timeout:
		x.mu.Lock()
		delete(x.calls, id.String())
		x.mu.Unlock()
		return wire.RPCMessage{}, fmt.Errorf("%s: no answer from the daemon within %s", method, max)
	}
}

type execParams struct {
	SessionToken   string   `json:"session_token"`
	SessionID      string   `json:"session_id"`
	SDKSessionID   string   `json:"sdk_session_id"`
	TaskID         string   `json:"task_id"`
	Prompt         string   `json:"prompt"`
	Cwd            string   `json:"cwd"`
	Tools          []string `json:"tools"`
	PermissionMode string   `json:"permission_mode"`
	// Loop is the loop the prompt is an iteration of: given to the agent
	// as ORCHESTRD_LOOP_ID, _TYPE, _ITERATION and _ARTIFACT.
	Loop *api.TaskLoop `json:"loop"`
}

func (x *cliExecutor) execute(m wire.RPCMessage) {
	var p execParams
	if e := wire.DecodeRPCParams(m, &p); e != nil {
		x.writeErr(m.ID, e)
		return
	}
	x.reply(m.ID, x.run(p))
}

// run runs the agent for one prompt through the pool's adapter and
// returns execute_prompt's result.
func (x *cliExecutor) run(p execParams) map[string]any {
	env := os.Environ()
	if l := p.Loop; l != nil {
		env = append(env, "ORCHESTRD_LOOP_ID="+l.ID, "ORCHESTRD_LOOP_TYPE="+string(l.LoopType),
			"ORCHESTRD_LOOP_ITERATION="+strconv.FormatUint(uint64(l.Iteration), 10), "ORCHESTRD_LOOP_ARTIFACT="+l.Artifact)
	}
	pr := &agent.Proc{}
	x.mu.Lock()
	x.tasks[p.TaskID] = pr
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.tasks, p.TaskID)
		x.mu.Unlock()
	}()
	h := &taskHost{x: x, token: p.SessionToken, taskID: p.TaskID}
	res := x.adapter.Run(agent.Task{ID: p.TaskID, SessionID: p.SessionID, Resume: p.SDKSessionID, Prompt: p.Prompt,
		Cwd: p.Cwd, PermissionMode: p.PermissionMode, Tools: p.Tools, Loop: p.Loop, Env: env, Proc: pr}, h)
	return res.Wire(h.count())
}

// taskHost is agent.Host on the executor's connection, for one task.
type taskHost struct {
	x      *cliExecutor
	token  string
	taskID string
	mu     sync.Mutex
	seq    int64
}

func (h *taskHost) count() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

func (h *taskHost) Report(typ string, data any) {
	// One sequence at a time: the messages go out in their order.
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.x.notify("report_message", map[string]any{"session_token": h.token, "task_id": h.taskID,
		"sequence": h.seq, "timestamp": time.Now().UnixMilli(), "event_type": typ, "event_data": data})
}

func (h *taskHost) ReportError(code, msg string) {
	h.x.notify("report_error", map[string]any{"session_token": h.token, "task_id": h.taskID,
		"error": map[string]any{"code": code, "message": msg}})
}

func (h *taskHost) Permission(tool string, input json.RawMessage) (agent.Decision, error) {
	return h.PermissionWith(tool, input, nil)
}

// PermissionWith is request_permission with the agent's permission
// suggestions (what an "always" records as a rule).
func (h *taskHost) PermissionWith(tool string, input json.RawMessage, suggestions []json.RawMessage) (agent.Decision, error) {
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	params := map[string]any{"session_token": h.token, "task_id": h.taskID, "tool_name": tool, "tool_input": input}
	if len(suggestions) > 0 {
		params["permission_suggestions"] = suggestions
	}
	r, err := h.x.callWait("request_permission", params, 0)
	if err != nil {
		return agent.Decision{}, err
	}
	var d struct {
		Approved bool   `json:"approved"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal(r.Result, &d); err != nil {
		return agent.Decision{}, fmt.Errorf("request_permission's answer: %w", err)
	}
	return agent.Decision{Approved: d.Approved, Reason: d.Reason}, nil
}

func (h *taskHost) APIKey(service string) (string, error) {
	r, err := h.x.call("get_api_key", map[string]any{"session_token": h.token, "credential_key": service})
	if err != nil {
		return "", err
	}
	var k struct {
		APIKey string `json:"api_key"`
	}
	if json.Unmarshal(r.Result, &k) != nil || k.APIKey == "" {
		return "", errors.New("the daemon's get_api_key answer has no api_key")
	}
	return k.APIKey, nil
}
