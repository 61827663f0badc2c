package main

import (
	"bufio"
	"bytes"
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
	"github.com/orchestrd/orchestrd/executors/ptyfd"
	"github.com/orchestrd/orchestrd/wire"
)

const executorUsage = `orchestrd executor [--key-env VAR [--key-service S]] [--stop-grace D] -- CMD [ARGS...]

An Agor-style executor that runs any command-line agent, one process per
prompt. The daemon starts it (an [executors.NAME] command) and appends
--socket PATH, or --fd 3 (transport = "fd": its end of a socketpair). Each prompt runs CMD ARGS in the task's directory, with the
prompt in place of an argument {prompt}, else on its stdin. Its stdout
lines are the task's messages (a JSON line with a "type" passes through
as it is, a plain line is text), its stderr lines are reported errors, its
exit code is the task's status. --key-env fetches an API key from the
daemon for each prompt and gives it to that one process as VAR. A prompt
that is an iteration of a loop gives CMD ORCHESTRD_LOOP_ID,
ORCHESTRD_LOOP_TYPE, ORCHESTRD_LOOP_ITERATION and ORCHESTRD_LOOP_ARTIFACT
(where to write the loop's artifact, relative to its directory).
spawn_terminal starts the shell asked for (default $SHELL, else /bin/sh)
on a new PTY and passes the PTY to the daemon ('orchestrd terminal').`

// lineMax bounds one stdout line as a message; a longer line is split, and
// said so.
const lineMax = 1 << 20

func cmdExecutor(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("executor")
	keyEnv := fs.String("key-env", "", "fetch an API key for each prompt and give it to the agent as environment variable `VAR`")
	keyService := fs.String("key-service", "", "the `SERVICE` of the key (default: VAR itself, such as ANTHROPIC_API_KEY)")
	grace := fs.Duration("stop-grace", 5*time.Second, "on stop_task, SIGINT then SIGKILL after `D`")
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
	if len(argv) == 0 {
		return usageError(fs, executorUsage, stderr, "no agent command given after --")
	}
	if *socket == "" && *fd < 0 {
		return usageError(fs, executorUsage, stderr, "no --socket PATH or --fd N (the daemon appends one)")
	}
	service := *keyService
	if service == "" {
		service = *keyEnv
	}
	conn, err := daemonConn(*socket, *fd)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd executor: %v\n", err)
		return exitFailure
	}
	x := &cliExecutor{conn: conn, argv: argv, keyEnv: *keyEnv, service: service, grace: *grace,
		calls: map[string]chan wire.RPCMessage{}, tasks: map[string]*cliTask{}, terms: map[int]*exec.Cmd{}, stderr: stderr}
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
	argv    []string
	keyEnv  string
	service string
	grace   time.Duration
	stderr  io.Writer

	wmu sync.Mutex // one line at a time on the socket

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	nextID int
	calls  map[string]chan wire.RPCMessage
	tasks  map[string]*cliTask
	terms  map[int]*exec.Cmd // shells on PTYs, by pid
	wg     sync.WaitGroup
}

// cliTask is one prompt's agent process.
type cliTask struct {
	id, token string
	cmd       *exec.Cmd
	stopped   bool
	mu        sync.Mutex
}

func (x *cliExecutor) serve() int {
	lr := wire.NewRPCLineReader(x.conn, 0)
	for {
		line, err := lr.Next()
		if err != nil {
			// The daemon went away: what runs is killed.
			x.killAll(syscall.SIGKILL)
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
					t.signal(syscall.SIGKILL)
				} else {
					t.stop(x.grace)
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
		t.signal(sig)
	}
}

func (t *cliTask) signal(sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cmd != nil && t.cmd.Process != nil {
		_ = syscall.Kill(-t.cmd.Process.Pid, sig)
	}
}

// stop sends SIGINT to the agent's group, SIGKILL after grace.
func (t *cliTask) stop(grace time.Duration) {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.signal(syscall.SIGINT)
	time.AfterFunc(grace, func() { t.signal(syscall.SIGKILL) })
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

// call sends a request and waits for its response.
func (x *cliExecutor) call(method string, params any) (wire.RPCMessage, error) {
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
	select {
	case m := <-ch:
		if m.Error != nil {
			return m, m.Error
		}
		return m, nil
	case <-time.After(2 * time.Minute):
		return wire.RPCMessage{}, fmt.Errorf("%s: no answer from the daemon within 2 minutes", method)
	}
}

type execParams struct {
	SessionToken string `json:"session_token"`
	TaskID       string `json:"task_id"`
	Prompt       string `json:"prompt"`
	Cwd          string `json:"cwd"`
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
	result := x.run(p)
	x.reply(m.ID, result)
}

// run runs the agent for one prompt and returns execute_prompt's result.
func (x *cliExecutor) run(p execParams) map[string]any {
	seq := int64(0)
	report := func(typ string, data json.RawMessage) {
		seq++
		x.notify("report_message", map[string]any{"session_token": p.SessionToken, "task_id": p.TaskID,
			"sequence": seq, "timestamp": time.Now().UnixMilli(), "event_type": typ, "event_data": data})
	}
	reportErr := func(code, msg string) {
		x.notify("report_error", map[string]any{"session_token": p.SessionToken, "task_id": p.TaskID,
			"error": map[string]any{"code": code, "message": msg}})
	}
	failed := func(code, msg string) map[string]any {
		return map[string]any{"status": "failed", "message_count": seq, "error": map[string]any{"code": code, "message": msg}}
	}
	env := os.Environ()
	if x.keyEnv != "" {
		r, err := x.call("get_api_key", map[string]any{"session_token": p.SessionToken, "credential_key": x.service})
		if err != nil {
			return failed("no_api_key", fmt.Sprintf("fetching the API key for %s: %v", x.service, err))
		}
		var k struct {
			APIKey string `json:"api_key"`
		}
		if json.Unmarshal(r.Result, &k) != nil || k.APIKey == "" {
			return failed("no_api_key", "the daemon's get_api_key answer has no api_key")
		}
		env = append(env, x.keyEnv+"="+k.APIKey)
	}
	if l := p.Loop; l != nil {
		env = append(env, "ORCHESTRD_LOOP_ID="+l.ID, "ORCHESTRD_LOOP_TYPE="+string(l.LoopType),
			"ORCHESTRD_LOOP_ITERATION="+strconv.FormatUint(uint64(l.Iteration), 10), "ORCHESTRD_LOOP_ARTIFACT="+l.Artifact)
	}
	argv := make([]string, len(x.argv))
	onStdin := true
	for i, a := range x.argv {
		if strings.Contains(a, "{prompt}") {
			a, onStdin = strings.ReplaceAll(a, "{prompt}", p.Prompt), false
		}
		argv[i] = a
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = p.Cwd, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if onStdin {
		cmd.Stdin = strings.NewReader(p.Prompt)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		return failed("start_failed", err.Error())
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		return failed("start_failed", err.Error())
	}
	t := &cliTask{id: p.TaskID, token: p.SessionToken}
	t.mu.Lock()
	t.cmd = cmd
	err = cmd.Start()
	t.mu.Unlock()
	if err != nil {
		return failed("start_failed", fmt.Sprintf("starting %s: %v", argv[0], err))
	}
	x.mu.Lock()
	x.tasks[p.TaskID] = t
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.tasks, p.TaskID)
		x.mu.Unlock()
	}()
	var usage *api.TokenUsage
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(errR)
		sc.Buffer(make([]byte, 64<<10), lineMax)
		for sc.Scan() {
			reportErr("stderr", sc.Text())
		}
	}()
	br := bufio.NewReaderSize(outR, 64<<10)
	for {
		line, err := readLine(br, lineMax)
		if len(line.b) > 0 || (err == nil && !line.split) {
			typ, data, u := messageOf(line.b)
			if u != nil {
				usage = u
			}
			report(typ, data)
		}
		if line.split {
			reportErr("line_split", fmt.Sprintf("a stdout line over %d bytes was split into several messages", lineMax))
		}
		if err != nil {
			break
		}
	}
	wg.Wait()
	werr := cmd.Wait()
	res := map[string]any{"message_count": seq}
	if usage != nil {
		res["token_usage"] = usage
	}
	t.mu.Lock()
	stopped := t.stopped
	t.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case stopped:
		res["status"] = "cancelled"
	case werr == nil:
		res["status"] = "completed"
	case errors.As(werr, &ee):
		res["status"] = "failed"
		code := ee.ExitCode()
		msg := fmt.Sprintf("%s exited with code %d", argv[0], code)
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			msg = fmt.Sprintf("%s was killed by %s", argv[0], ws.Signal())
		}
		res["error"] = map[string]any{"code": fmt.Sprintf("exit_%d", code), "message": msg}
	default:
		res["status"] = "failed"
		res["error"] = map[string]any{"code": "wait_failed", "message": werr.Error()}
	}
	return res
}

type lineRead struct {
	b     []byte
	split bool // the line was longer than max: this is a part of it
}

// readLine reads one line (without its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) (lineRead, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		buf = append(buf, frag...)
		if err == nil {
			return lineRead{b: bytes.TrimRight(buf, "\r\n")}, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(buf) >= max {
				return lineRead{b: buf, split: true}, nil
			}
			continue
		}
		return lineRead{b: buf}, err
	}
}

// messageOf turns one stdout line into a message: a JSON object passes
// through with its "type" as event_type (and a Claude Code "result" line
// gives the token usage); anything else is text.
func messageOf(line []byte) (string, json.RawMessage, *api.TokenUsage) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		var head struct {
			Type  string `json:"type"`
			Usage *struct {
				InputTokens              int64 `json:"input_tokens"`
				OutputTokens             int64 `json:"output_tokens"`
				CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
				CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(trimmed, &head)
		typ := head.Type
		if typ == "" {
			typ = "json"
		}
		var u *api.TokenUsage
		if head.Type == "result" && head.Usage != nil {
			u = &api.TokenUsage{InputTokens: head.Usage.InputTokens, OutputTokens: head.Usage.OutputTokens,
				CacheReadTokens: head.Usage.CacheReadInputTokens, CacheWriteTokens: head.Usage.CacheCreationInputTokens}
		}
		return typ, json.RawMessage(trimmed), u
	}
	data, _ := json.Marshal(map[string]any{"delta": map[string]string{"text": string(line) + "\n"}})
	return "content_block_delta", data, nil
}
