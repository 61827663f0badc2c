package agent

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

// Codex is the "codex" kind: OpenAI's Codex CLI driven through its
// app-server (JSON-RPC 2.0 over stdio, one process per prompt), the
// interface in which the host answers its approval requests. `codex exec
// --json` cannot ask anyone: it would run every command or none.
//
// For each prompt the adapter starts `codex [ARGS] -c ... app-server`,
// initializes, starts a thread (or resumes the task's Resume thread: the
// model gets the history) and one turn with the prompt, and follows the
// turn to its end:
//   - the model provider comes from -c flags (Codex ignores
//     OPENAI_BASE_URL): base_url = the pool env's OPENAI_BASE_URL (default
//     https://api.openai.com/v1), wire_api responses, its key from
//     OPENAI_API_KEY; model = Options.Model (default: Codex's);
//     CODEX_HOME = Options.StateDir. The key (get_api_key("openai")) is
//     never Codex's: Codex talks to a proxy of the adapter's on
//     127.0.0.1 with a token of the run's, and the proxy adds the key on
//     the way out, so that a command the model runs cannot read it in
//     Codex's environment (the variable is also kept out of the
//     commands' own). Refused: no key, and Codex's failure says
//     auth_failed;
//   - Codex's own sandbox (bubblewrap) cannot start inside orchestrd's:
//     commands run with its sandbox off (danger-full-access), confined by
//     orchestrd's, under approval policy "untrusted", with which Codex asks
//     before every command and every file change: each request becomes a
//     request_permission (a command as tool "Bash" {command, cwd}, so that
//     Bash rules apply as they do to Claude Code; a file change as
//     "apply_patch" {changes}), and the answer goes back as accept or
//     decline. No command runs on a terminal (Codex would type into it
//     without asking: approving `psql` is not approving what the model
//     types into it next); without one a command's stdin is closed. A
//     denial's reason reaches the model as a message in the same turn
//     (Codex's decline carries none), and is reported as
//     permission_denied. Modes: acceptEdits accepts file changes without
//     asking when every file it touches is in the task's directory
//     (links resolved), not in CODEX_HOME nor under a .git or .codex
//     directory (else it is asked); bypassPermissions runs Codex with
//     approval policy "never"; plan refuses every file change and every command without asking
//     (Codex's read-only sandbox is asked for too, but inside orchestrd's
//     it does not hold, and nothing tells a reading command from a
//     writing one);
//   - Task.Tools, when given, is enforced by the adapter: a command needs
//     "Bash" (or "exec_command"), a file change "apply_patch" (or "Edit",
//     "Write"); Codex's other tools (web search, view image...) have no
//     approval of their own and are not restricted;
//   - its notifications become the api.Msg* messages: agent message
//     deltas text, reasoning deltas thinking, command executions and
//     file changes (and MCP, web search, sub-agent calls) tool_call and
//     tool_result, token usage usage, the turn's end result; every other
//     line an agent_line;
//   - a rate or usage limit (HTTP 429, usageLimitExceeded) ends the task
//     usage_limit (RetryAt from Codex's "try again at" when it says), a
//     refused key (401, 403) auth_failed, both at the first sign: Codex is
//     stopped rather than left to retry.
type Codex struct{ Opts Options }

func init() { kinds[KindCodex] = func(o Options) Adapter { return &Codex{o} } }

// codexProvider is the model provider's name in Codex's config.
const codexProvider = "orchestrd"

// codexArgv is the command line of Codex's app-server for a task.
func codexArgv(o Options, baseURL string) []string {
	argv := append([]string(nil), o.Argv...)
	set := func(k, v string) { argv = append(argv, "-c", k+"="+tomlString(v)) }
	p := "model_providers." + codexProvider + "."
	set("model_provider", codexProvider)
	set(p+"name", codexProvider)
	set(p+"base_url", baseURL)
	set(p+"wire_api", "responses")
	set(p+"env_key", "OPENAI_API_KEY")
	if o.Model != "" {
		set("model", o.Model)
	}
	// The key is Codex's, not its commands': `env` in a command the model
	// runs does not show it.
	argv = append(argv, "-c", `shell_environment_policy.exclude=["OPENAI_API_KEY"]`)
	// No command on a terminal: Codex does not ask before it types into
	// one that still runs (write_stdin), and approving `bash`, `psql` or
	// `python3` is not approving whatever the model types into it next.
	// Without a terminal a command's stdin is closed.
	argv = append(argv, "-c", "features.unified_exec_tty=false")
	return append(argv, "app-server")
}

// tomlString quotes s as a TOML basic string (a JSON string is one, with
// HTML left unescaped).
func tomlString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// codexPolicy is how a permission mode reaches Codex.
type codexPolicy struct {
	approval string         // thread's approvalPolicy
	sandbox  string         // thread's sandbox mode
	turn     map[string]any // turn's sandboxPolicy
}

func policyOf(mode string) codexPolicy {
	switch mode {
	case api.ModeBypass:
		return codexPolicy{"never", "danger-full-access", map[string]any{"type": "dangerFullAccess"}}
	case api.ModePlan:
		return codexPolicy{"untrusted", "read-only", map[string]any{"type": "readOnly"}}
	}
	// default, acceptEdits and anything unknown: ask for everything.
	return codexPolicy{"untrusted", "danger-full-access", map[string]any{"type": "dangerFullAccess"}}
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// withEnv is env with key set to value (earlier settings removed).
func withEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// threadIDRe is what a thread id to resume may look like (Codex's are
// UUIDs); anything else starts a new thread.
var threadIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`) })

func (a *Codex) Run(t Task, h Host) Result {
	env := t.Env
	baseURL := envValue(env, "OPENAI_BASE_URL")
	if baseURL == "" {
		baseURL = "https://api.openai.com/v1"
	}
	if key, err := h.APIKey("openai"); err == nil {
		// Codex gets a token of this run's, and its requests the key on
		// their way out: what Codex runs cannot read the key in Codex's
		// environment.
		kp, err := startKeyProxy(baseURL, key)
		if err != nil {
			return Failed("start_failed", "%v", err)
		}
		defer kp.close()
		env, baseURL = withEnv(env, "OPENAI_API_KEY", kp.token), kp.base
	} else {
		env = withEnv(env, "OPENAI_API_KEY", "")
		h.ReportError("no_api_key", "no key for openai from the daemon (the endpoint will refuse): "+err.Error())
	}
	if a.Opts.StateDir != "" {
		if err := os.MkdirAll(a.Opts.StateDir, 0o700); err != nil {
			return Failed("start_failed", "making codex's state directory: %v", err)
		}
		env = withEnv(env, "CODEX_HOME", a.Opts.StateDir)
	}
	argv := codexArgv(a.Opts, baseURL)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = t.Cwd, env
	pipes, failed := t.Proc.StartPiped(cmd)
	if failed != nil {
		return *failed
	}
	in, outR, errR := pipes.Stdin, pipes.Stdout, pipes.Stderr
	r := newCodexRun(t, h, in)
	r.stateDir = a.Opts.StateDir
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		ReportStderr(errR, h)
	}()
	go func() {
		defer wg.Done()
		r.read(outR)
	}()
	res := r.drive()
	// The turn is over (or failed): Codex ends when its stdin does; a
	// Codex that does not is killed.
	_ = in.Close()
	if res.Error != nil && (res.Error.Code == api.TaskErrUsageLimit || res.Error.Code == api.TaskErrAuthFailed) {
		t.Proc.Signal(syscall.SIGKILL)
	}
	exited := make(chan struct{})
	kill := time.AfterFunc(5*time.Second, func() { t.Proc.Signal(syscall.SIGKILL) })
	go func() {
		wg.Wait()
		close(exited)
	}()
	<-exited
	werr := cmd.Wait()
	kill.Stop()
	// What Codex left running in its group (a command past its yield
	// time) ends with the task.
	t.Proc.Signal(syscall.SIGKILL)
	// An approval still waiting for a person is not waited for long: its
	// answer has nobody left to hear it.
	waited := make(chan struct{})
	go func() {
		r.approvals.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(2 * time.Second):
	}
	if t.Proc.Stopped() {
		res = Result{Status: "cancelled"}
	} else if res.Status == "" {
		res = ExitResult(argv[0], werr, t.Proc)
		if res.Status == "completed" {
			res = Failed("agent_exited", "codex ended before its turn completed")
		}
	}
	res.SDKSessionID = r.threadID()
	res.Denied = r.deniedCount()
	if res.Usage == nil {
		res.Usage = r.usage()
	}
	if !r.resulted() {
		// The run's end, once, when Codex's turn did not tell it.
		text := res.Status
		if res.Error != nil {
			text = res.Error.Code + ": " + res.Error.Message
		}
		h.Report(api.MsgResult, api.ResultData{Text: text, IsError: true, SDKSessionID: res.SDKSessionID,
			Denied: res.Denied, Usage: res.Usage})
	}
	return res
}

// keyProxy passes Codex's model requests on to the endpoint with the key
// in their Authorization header, on 127.0.0.1: Codex (and so every
// command it runs, which can read its environment in /proc) holds only a
// token of one run's, good for this proxy alone.
type keyProxy struct {
	srv   *http.Server
	tr    *http.Transport
	done  chan struct{}
	token string
	base  string // Codex's base_url
}

func startKeyProxy(upstream, key string) (*keyProxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OPENAI_BASE_URL is not an http(s) URL")
	}
	token := "orchestrd-" + api.RandomHex(24)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for codex's model requests: %w", err)
	}
	target := &url.URL{Scheme: u.Scheme, Host: u.Host}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("Authorization", "Bearer "+key)
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	want := []byte("Bearer " + token)
	p := &keyProxy{done: make(chan struct{}), token: token, tr: tr,
		base: "http://" + ln.Addr().String() + strings.TrimSuffix(u.Path, "/")}
	p.srv = &http.Server{ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				http.Error(w, "not this run's token", http.StatusUnauthorized)
				return
			}
			rp.ServeHTTP(w, r)
		})}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

func (p *keyProxy) close() {
	_ = p.srv.Close()
	<-p.done
	p.tr.CloseIdleConnections()
}

// codexRun is one prompt's conversation with Codex's app-server.
type codexRun struct {
	t        Task
	h        Host
	stateDir string // Codex's CODEX_HOME

	wmu sync.Mutex
	w   io.Writer

	approvals sync.WaitGroup
	dead      chan struct{} // the reader ended
	ended     chan struct{} // the turn ended (ok or failed)
	endOnce   sync.Once

	mu         sync.Mutex
	nextID     int64
	calls      map[int64]chan codexReply
	thread     string
	turn       string
	denied     int
	end        Result
	text       strings.Builder // the last agent message's text
	base       *api.TokenUsage // the thread's total before this task's first model call
	total      *api.TokenUsage
	modelCalls int // model calls (token usage updates)
	changes    map[string]json.RawMessage
	resultSent bool
}

func (r *codexRun) resulted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resultSent
}

type codexReply struct {
	result json.RawMessage
	err    *codexError
}

type codexError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *codexError) Error() string {
	return fmt.Sprintf("codex answered error %d: %s", e.Code, e.Message)
}

func newCodexRun(t Task, h Host, w io.Writer) *codexRun {
	return &codexRun{t: t, h: h, w: w, dead: make(chan struct{}), ended: make(chan struct{}),
		calls: map[int64]chan codexReply{}, changes: map[string]json.RawMessage{}}
}

func (r *codexRun) threadID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.thread
}

func (r *codexRun) deniedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.denied
}

// usage is this task's tokens: the thread's total now less its total
// before the task's first model call.
func (r *codexRun) usage() *api.TokenUsage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == nil || r.base == nil {
		return nil
	}
	u := *r.total
	u.InputTokens -= r.base.InputTokens
	u.OutputTokens -= r.base.OutputTokens
	u.CacheReadTokens -= r.base.CacheReadTokens
	u.CacheWriteTokens -= r.base.CacheWriteTokens
	return &u
}

// finish ends the turn with res (the first end wins).
func (r *codexRun) finish(res Result) {
	r.endOnce.Do(func() {
		r.mu.Lock()
		r.end = res
		r.mu.Unlock()
		close(r.ended)
	})
}

// drive runs the conversation: initialize, the thread, the turn, and
// waits for the turn's end. A Result with no Status: Codex ended first.
func (r *codexRun) drive() Result {
	p := policyOf(r.t.PermissionMode)
	if _, err := r.call("initialize", map[string]any{
		"clientInfo": map[string]any{"name": "orchestrd", "title": "orchestrd", "version": "1"}}); err != nil {
		return r.failedCall("initialize", err)
	}
	r.notify("initialized", nil)
	thread := map[string]any{"cwd": r.t.Cwd, "approvalPolicy": p.approval, "sandbox": p.sandbox}
	var res json.RawMessage
	var err error
	if r.t.Resume != "" && threadIDRe().MatchString(r.t.Resume) {
		thread["threadId"] = r.t.Resume
		res, err = r.call("thread/resume", thread)
		if err != nil {
			if _, ok := err.(*codexError); !ok {
				return r.failedCall("thread/resume", err)
			}
			// The thread is gone (a state directory wiped): a new one,
			// and said so.
			r.h.ReportError("resume_failed", "codex could not resume the session's thread; starting a new one")
			delete(thread, "threadId")
			res, err = r.call("thread/start", thread)
		}
	} else {
		res, err = r.call("thread/start", thread)
	}
	if err != nil {
		return r.failedCall("thread/start", err)
	}
	var th struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if json.Unmarshal(res, &th) != nil || th.Thread.ID == "" {
		return Failed("agent_error", "codex's thread/start answer has no thread id")
	}
	r.mu.Lock()
	r.thread = th.Thread.ID
	r.mu.Unlock()
	res, err = r.call("turn/start", map[string]any{"threadId": th.Thread.ID, "cwd": r.t.Cwd,
		"input": []any{map[string]any{"type": "text", "text": r.t.Prompt}}, "approvalPolicy": p.approval, "sandboxPolicy": p.turn})
	if err != nil {
		return r.failedCall("turn/start", err)
	}
	var tu struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	_ = json.Unmarshal(res, &tu)
	r.mu.Lock()
	if r.turn == "" {
		r.turn = tu.Turn.ID
	}
	r.mu.Unlock()
	select {
	case <-r.ended:
	case <-r.dead:
		// Codex ended: a last turn/completed may have come with it.
		select {
		case <-r.ended:
		default:
			return Result{}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}

func (r *codexRun) failedCall(what string, err error) Result {
	select {
	case <-r.ended: // a usage limit or a refused key came first
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.end
	default:
	}
	if errors.Is(err, errCodexGone) {
		return Result{}
	}
	return Failed("agent_error", "codex %s: %s", what, bounded(err.Error()))
}

var errCodexGone = errors.New("codex ended")

// call sends a request and waits for its answer (or Codex's end).
func (r *codexRun) call(method string, params any) (json.RawMessage, error) {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	ch := make(chan codexReply, 1)
	r.calls[id] = ch
	r.mu.Unlock()
	r.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case rep := <-ch:
		if rep.err != nil {
			return nil, rep.err
		}
		return rep.result, nil
	case <-r.dead:
		return nil, errCodexGone
	case <-r.ended:
		return nil, errCodexGone
	}
}

// send sends a request whose answer nobody waits for.
func (r *codexRun) send(method string, params any) {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.mu.Unlock()
	r.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

func (r *codexRun) notify(method string, params any) {
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		m["params"] = params
	}
	r.write(m)
}

func (r *codexRun) answer(id json.RawMessage, result any) {
	r.write(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (r *codexRun) answerError(id json.RawMessage, code int, msg string) {
	r.write(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

func (r *codexRun) write(m map[string]any) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, _ = r.w.Write(append(b, '\n'))
}

// read reads Codex's stdout to its end, one line at a time.
func (r *codexRun) read(out io.Reader) {
	defer close(r.dead)
	br := bufio.NewReaderSize(out, 64<<10)
	for {
		line, err := ReadLine(br, LineMax)
		if line.Split {
			r.tooLong(line.B)
			for line.Split && err == nil { // the rest of it
				line, err = ReadLine(br, LineMax)
			}
		} else if len(line.B) > 0 {
			r.onLine(line.B)
		}
		if err != nil {
			return
		}
	}
}

// tooLong is a line over LineMax: refused, said so, and if it was a
// request of Codex's (an approval: its method and id come first), it is
// answered with a refusal so that Codex does not wait for ever.
func (r *codexRun) tooLong(head []byte) {
	r.h.ReportError("line_too_long", fmt.Sprintf("a codex line over %d bytes was refused", LineMax))
	id, method := envelopeHead(head)
	if id == nil || method == "" {
		return
	}
	switch method {
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval":
		r.mu.Lock()
		r.denied++
		r.mu.Unlock()
		r.h.Report(api.MsgPermissionDenied, api.PermissionDeniedData{Name: approvalTool(method),
			Reason: "the request was too long to show"})
		r.answer(id, map[string]any{"decision": "decline"})
	default:
		r.answerError(id, -32600, "request too long")
	}
}

// envelopeHead reads a JSON-RPC message's id and method from the start
// of a line (its members before "params"), which may be cut.
func envelopeHead(head []byte) (json.RawMessage, string) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, ""
	}
	var id json.RawMessage
	method := ""
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		if key == "params" || key == "result" {
			break
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			break
		}
		switch key {
		case "id":
			id = v
		case "method":
			_ = json.Unmarshal(v, &method)
		}
	}
	return id, method
}

// codexEnvelope is a JSON-RPC message from Codex.
type codexEnvelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *codexError     `json:"error"`
}

// onLine handles one line of Codex's stdout.
func (r *codexRun) onLine(line []byte) {
	var m codexEnvelope
	if !json.Valid(line) || json.Unmarshal(line, &m) != nil {
		r.agentLine(line)
		return
	}
	switch {
	case m.Method == "" && len(m.ID) > 0: // an answer to our request
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		r.mu.Lock()
		ch := r.calls[id]
		delete(r.calls, id)
		r.mu.Unlock()
		if err == nil && ch != nil {
			ch <- codexReply{result: m.Result, err: m.Error}
		}
		r.agentLine(line)
	case m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null": // Codex asks
		r.approvals.Add(1)
		go func() {
			defer r.approvals.Done()
			r.serverRequest(m, line)
		}()
	case m.Method != "":
		r.notification(m.Method, m.Params, line)
	default:
		r.agentLine(line)
	}
}

func (r *codexRun) agentLine(line []byte) {
	l := json.RawMessage(line)
	if !json.Valid(line) {
		l, _ = json.Marshal(strings.ToValidUTF8(string(line), "\uFFFD"))
	}
	r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindCodex, Line: l})
}

// codexItem is a ThreadItem, the fields the adapter reads.
type codexItem struct {
	Type             string          `json:"type"`
	ID               string          `json:"id"`
	Text             string          `json:"text"`
	Command          string          `json:"command"`
	Cwd              string          `json:"cwd"`
	Status           string          `json:"status"`
	AggregatedOutput *string         `json:"aggregatedOutput"`
	ExitCode         *int            `json:"exitCode"`
	Changes          json.RawMessage `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Error            json.RawMessage `json:"error"`
	Query            string          `json:"query"`
}

type codexTokens struct {
	InputTokens       int64 `json:"inputTokens"`
	CachedInputTokens int64 `json:"cachedInputTokens"`
	CacheWriteTokens  int64 `json:"cacheWriteInputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
}

// tokenUsage is Codex's tokens as orchestrd counts them: input without
// the cached part (as Claude Code's input_tokens), cache reads apart.
func (c codexTokens) tokenUsage() *api.TokenUsage {
	in := c.InputTokens - c.CachedInputTokens
	if in < 0 {
		in = 0
	}
	return &api.TokenUsage{InputTokens: in, OutputTokens: c.OutputTokens, CacheReadTokens: c.CachedInputTokens,
		CacheWriteTokens: c.CacheWriteTokens}
}

func (r *codexRun) ours(thread string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.thread == "" || thread == r.thread
}

func (r *codexRun) notification(method string, params json.RawMessage, line []byte) {
	raw := json.RawMessage(line)
	var p struct {
		ThreadID string          `json:"threadId"`
		TurnID   string          `json:"turnId"`
		ItemID   string          `json:"itemId"`
		Delta    string          `json:"delta"`
		Item     json.RawMessage `json:"item"`
		Turn     json.RawMessage `json:"turn"`
		Error    json.RawMessage `json:"error"`
		Retry    bool            `json:"willRetry"`
		Usage    *struct {
			Total codexTokens `json:"total"`
			Last  codexTokens `json:"last"`
		} `json:"tokenUsage"`
	}
	if json.Unmarshal(params, &p) != nil {
		r.agentLine(line)
		return
	}
	switch method {
	case "item/agentMessage/delta":
		r.h.Report(api.MsgText, api.MsgTextData{Text: p.Delta, Raw: raw})
	case "item/reasoning/summaryTextDelta", "item/reasoning/textDelta":
		r.h.Report(api.MsgThinking, api.MsgTextData{Text: p.Delta, Raw: raw})
	case "item/started", "item/completed":
		var it codexItem
		if json.Unmarshal(p.Item, &it) != nil || !r.item(method == "item/started", it, p.ThreadID, raw) {
			r.agentLine(line)
		}
	case "thread/tokenUsage/updated":
		if p.Usage == nil || !r.ours(p.ThreadID) {
			r.agentLine(line)
			return
		}
		last, total := p.Usage.Last.tokenUsage(), p.Usage.Total.tokenUsage()
		r.mu.Lock()
		if r.base == nil {
			b := *total
			b.InputTokens -= last.InputTokens
			b.OutputTokens -= last.OutputTokens
			b.CacheReadTokens -= last.CacheReadTokens
			b.CacheWriteTokens -= last.CacheWriteTokens
			r.base = &b
		}
		r.total = total
		r.modelCalls++
		r.mu.Unlock()
		r.h.Report(api.MsgUsage, api.UsageData{TokenUsage: *last, Raw: raw})
	case "error":
		r.errorNote(p.Error, p.Retry, p.ThreadID, line)
	case "turn/completed":
		if !r.ours(p.ThreadID) {
			r.agentLine(line)
			return
		}
		r.turnCompleted(p.Turn, raw)
	default:
		r.agentLine(line)
	}
}

// item reports a started or completed item; false when it gives no
// message.
func (r *codexRun) item(started bool, it codexItem, thread string, raw json.RawMessage) bool {
	switch it.Type {
	case "agentMessage":
		if started || !r.ours(thread) {
			return false
		}
		r.mu.Lock()
		r.text.Reset()
		r.text.WriteString(it.Text)
		r.mu.Unlock()
		return false
	case "commandExecution":
		if started {
			in, _ := json.Marshal(map[string]string{"command": shellScript(it.Command), "cwd": it.Cwd})
			r.h.Report(api.MsgToolCall, api.ToolCallData{ID: it.ID, Name: "Bash", Input: in, Raw: raw})
			return true
		}
		out := ""
		if it.AggregatedOutput != nil {
			out = *it.AggregatedOutput
		}
		isErr := it.Status != "completed" || (it.ExitCode != nil && *it.ExitCode != 0)
		if it.Status == "declined" && out == "" {
			out = "declined"
		}
		r.h.Report(api.MsgToolResult, api.ToolResultData{ID: it.ID, Output: out, IsError: isErr, Raw: raw})
		return true
	case "fileChange":
		if started {
			ch := it.Changes
			if len(ch) == 0 {
				ch = json.RawMessage(`[]`)
			}
			r.mu.Lock()
			if len(r.changes) < 1024 {
				r.changes[it.ID] = ch
			}
			r.mu.Unlock()
			in, _ := json.Marshal(map[string]json.RawMessage{"changes": ch})
			r.h.Report(api.MsgToolCall, api.ToolCallData{ID: it.ID, Name: "apply_patch", Input: in, Raw: raw})
			return true
		}
		r.mu.Lock()
		delete(r.changes, it.ID)
		r.mu.Unlock()
		out := it.Status
		r.h.Report(api.MsgToolResult, api.ToolResultData{ID: it.ID, Output: out, IsError: it.Status != "completed", Raw: raw})
		return true
	case "mcpToolCall", "dynamicToolCall", "webSearch", "collabAgentToolCall", "imageView":
		name := it.Type
		if it.Tool != "" {
			name = it.Tool
			if it.Server != "" {
				name = "mcp__" + it.Server + "__" + it.Tool
			}
		}
		if started {
			in := it.Arguments
			if len(in) == 0 || in[0] != '{' {
				in, _ = json.Marshal(map[string]any{"arguments": it.Arguments, "query": it.Query})
			}
			r.h.Report(api.MsgToolCall, api.ToolCallData{ID: it.ID, Name: name, Input: in, Raw: raw})
			return true
		}
		out := string(it.Result)
		if len(it.Error) > 0 && string(it.Error) != "null" {
			out = string(it.Error)
		}
		r.h.Report(api.MsgToolResult, api.ToolResultData{ID: it.ID, Output: out,
			IsError: it.Status == "failed" || (len(it.Error) > 0 && string(it.Error) != "null"), Raw: raw})
		return true
	}
	return false
}

// errorNote is Codex's error notification: a rate or usage limit, or a
// refused key, ends the task at once (Codex would retry for a while).
func (r *codexRun) errorNote(e json.RawMessage, willRetry bool, thread string, line []byte) {
	var te struct {
		Message string          `json:"message"`
		Info    json.RawMessage `json:"codexErrorInfo"`
		Details string          `json:"additionalDetails"`
	}
	if json.Unmarshal(e, &te) != nil {
		r.agentLine(line)
		return
	}
	r.agentLine(line)
	if code := classifyCodexError(te.Info); code != "" {
		res := Failed(code, "%s", bounded(te.Message))
		if code == api.TaskErrUsageLimit {
			if at, ok := retryAt(te.Message, time.Now()); ok {
				res.Error.RetryAt = &at
			}
		}
		r.finish(res)
	}
}

// classifyCodexError tells a codexErrorInfo apart: usage_limit,
// auth_failed, or "".
func classifyCodexError(info json.RawMessage) string {
	var s string
	if json.Unmarshal(info, &s) == nil {
		switch s {
		case "usageLimitExceeded", "rateLimitExceeded":
			return api.TaskErrUsageLimit
		case "unauthorized":
			return api.TaskErrAuthFailed
		}
		return ""
	}
	var obj map[string]struct {
		Status *int `json:"httpStatusCode"`
	}
	if json.Unmarshal(info, &obj) != nil {
		return ""
	}
	for _, v := range obj {
		if v.Status == nil {
			continue
		}
		switch *v.Status {
		case 429:
			return api.TaskErrUsageLimit
		case 401, 403:
			return api.TaskErrAuthFailed
		}
	}
	return ""
}

var (
	retryClockRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`try again at (\d{1,2}):(\d{2}) ?([AP]M)`) })
	retryDateRe  = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`try again at ([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) (\d{1,2}):(\d{2}) ?([AP]M)`)
	})
)

// retryAt reads the reset time in Codex's usage limit message ("try
// again at 9:28 AM", the next such time; "try again at Dec 1st, 2026
// 9:28 AM"), in local time as Codex writes it.
func retryAt(msg string, now time.Time) (time.Time, bool) {
	hour := func(h, ampm string) int {
		n, _ := strconv.Atoi(h)
		n %= 12
		if ampm == "PM" {
			n += 12
		}
		return n
	}
	if m := retryDateRe().FindStringSubmatch(msg); m != nil {
		mon, err := time.Parse("Jan", m[1])
		if err != nil {
			return time.Time{}, false
		}
		day, _ := strconv.Atoi(m[2])
		year, _ := strconv.Atoi(m[3])
		min, _ := strconv.Atoi(m[5])
		return time.Date(year, mon.Month(), day, hour(m[4], m[6]), min, 0, 0, now.Location()), true
	}
	if m := retryClockRe().FindStringSubmatch(msg); m != nil {
		min, _ := strconv.Atoi(m[2])
		at := time.Date(now.Year(), now.Month(), now.Day(), hour(m[1], m[3]), min, 0, 0, now.Location())
		if at.Before(now) {
			at = at.AddDate(0, 0, 1)
		}
		return at, true
	}
	return time.Time{}, false
}

func (r *codexRun) turnCompleted(turn json.RawMessage, raw json.RawMessage) {
	var tc struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  *struct {
			Message string          `json:"message"`
			Info    json.RawMessage `json:"codexErrorInfo"`
		} `json:"error"`
	}
	_ = json.Unmarshal(turn, &tc)
	r.mu.Lock()
	if r.turn != "" && tc.ID != "" && tc.ID != r.turn {
		r.mu.Unlock()
		r.agentLine(raw)
		return
	}
	text, thread, denied, calls := r.text.String(), r.thread, r.denied, r.modelCalls
	r.mu.Unlock()
	res := Result{Status: "completed"}
	switch tc.Status {
	case "completed":
	case "interrupted":
		res = Failed("interrupted", "codex's turn was interrupted")
	default:
		msg := "codex's turn failed"
		code := "agent_error"
		if tc.Error != nil {
			msg = bounded(tc.Error.Message)
			if c := classifyCodexError(tc.Error.Info); c != "" {
				code = c
			} else if strings.Contains(msg, "OPENAI_API_KEY") {
				// No key (get_api_key refused): Codex does not even ask.
				code = api.TaskErrAuthFailed
			}
		}
		res = Failed(code, "%s", msg)
		if code == api.TaskErrUsageLimit {
			if at, ok := retryAt(msg, time.Now()); ok {
				res.Error.RetryAt = &at
			}
		}
	}
	res.Usage = r.usage()
	r.mu.Lock()
	r.resultSent = true
	r.mu.Unlock()
	r.h.Report(api.MsgResult, api.ResultData{Text: text, IsError: res.Status != "completed", SDKSessionID: thread,
		Denied: denied, Turns: calls, Usage: res.Usage, Raw: raw})
	r.finish(res)
}

// approvalTool is the tool name a Codex approval request is asked as.
func approvalTool(method string) string {
	if method == "item/fileChange/requestApproval" || method == "applyPatchApproval" {
		return "apply_patch"
	}
	return "Bash"
}

// maxPermissionInput bounds what a permission shows: a change too large
// to show is refused rather than approved unseen.
const maxPermissionInput = 256 << 10

// serverRequest answers one of Codex's requests.
func (r *codexRun) serverRequest(m codexEnvelope, line []byte) {
	raw := json.RawMessage(line)
	var p struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
		ItemID   string `json:"itemId"`
		Kind     string `json:"kind"`
		Command  string `json:"command"`
		Cwd      string `json:"cwd"`
		Reason   string `json:"reason"`
	}
	_ = json.Unmarshal(m.Params, &p)
	mode := r.t.PermissionMode
	var tool string
	var input json.RawMessage
	switch m.Method {
	case "item/commandExecution/requestApproval":
		tool = "Bash"
		if p.Kind == "writeStdin" {
			tool = "write_stdin"
			input, _ = json.Marshal(map[string]any{"command": p.Command, "cwd": p.Cwd, "params": json.RawMessage(m.Params)})
		} else {
			input, _ = json.Marshal(map[string]string{"command": shellScript(p.Command), "cwd": p.Cwd})
		}
	case "item/fileChange/requestApproval":
		tool = "apply_patch"
		r.mu.Lock()
		ch := r.changes[p.ItemID]
		r.mu.Unlock()
		if ch == nil {
			ch = json.RawMessage(`[]`)
		}
		input, _ = json.Marshal(map[string]any{"changes": ch})
	default:
		// Legacy approvals, permissions, user input, MCP elicitations,
		// dynamic tools, token refresh: nothing the adapter grants.
		r.agentLine(line)
		r.answerError(m.ID, -32601, "orchestrd does not answer "+m.Method)
		return
	}
	r.h.Report(api.MsgAgentLine, api.AgentLineData{Agent: KindCodex, Line: raw})
	if !validUTF8JSON(input) {
		input = json.RawMessage(`{}`)
	}
	deny := func(reason string) {
		r.mu.Lock()
		r.denied++
		r.mu.Unlock()
		r.h.Report(api.MsgPermissionDenied, api.PermissionDeniedData{ID: p.ItemID, Name: tool, Input: input, Reason: reason})
		// Codex's decline carries no reason: the model hears it as a
		// message in the same turn, before the decline lets it go on.
		if p.ThreadID != "" && p.TurnID != "" {
			r.send("turn/steer", map[string]any{"threadId": p.ThreadID, "expectedTurnId": p.TurnID,
				"input": []any{map[string]any{"type": "text", "text": fmt.Sprintf(
					"orchestrd refused the %s call (%s): %s", tool, p.ItemID, reason)}}})
		}
		r.answer(m.ID, map[string]any{"decision": "decline"})
	}
	switch {
	case mode == api.ModeBypass:
		r.answer(m.ID, map[string]any{"decision": "accept"})
		return
	case mode == api.ModePlan && tool == "apply_patch":
		deny("plan mode: no file changes")
		return
	case mode == api.ModePlan:
		// Codex's read-only sandbox does not hold inside orchestrd's
		// (a command approved in it wrote its file), and nothing here
		// tells a reading command from a writing one.
		deny("plan mode: no commands run (Codex's read-only sandbox cannot be relied on here)")
		return
	case mode == api.ModeAcceptEdits && tool == "apply_patch" && r.toolAllowed(tool) &&
		editsWithin(r.changesOf(p.ItemID), r.t.Cwd, r.stateDir):
		r.answer(m.ID, map[string]any{"decision": "accept"})
		return
	case !r.toolAllowed(tool):
		deny(fmt.Sprintf("%s is not one of the task's tools", tool))
		return
	case len(input) > maxPermissionInput:
		deny(fmt.Sprintf("the request is over %d bytes, too large to show for approval", maxPermissionInput))
		return
	}
	d, err := r.permission(tool, input, suggestionsFor(tool, input))
	if err != nil {
		deny("no answer from orchestrd: " + err.Error())
		return
	}
	if !d.Approved {
		reason := d.Reason
		if reason == "" {
			reason = "denied"
		}
		deny(reason)
		return
	}
	r.answer(m.ID, map[string]any{"decision": "accept"})
}

// suggestingHost is a Host that passes an agent's permission suggestions
// on with request_permission: what an `approve --always` records as an
// orchestrd rule.
type suggestingHost interface {
	PermissionWith(tool string, input json.RawMessage, suggestions []json.RawMessage) (Decision, error)
}

func (r *codexRun) permission(tool string, input json.RawMessage, sugg []json.RawMessage) (Decision, error) {
	if sh, ok := r.h.(suggestingHost); ok && len(sugg) > 0 {
		return sh.PermissionWith(tool, input, sugg)
	}
	return r.h.Permission(tool, input)
}

// suggestionsFor is what an "always" may record, in Claude Code's
// suggestion format that approvals reads, for this orchestrd session: a
// command, that exact command (a Bash rule, so split and matched as
// approvals matches Bash); a file change, every file change (an
// apply_patch rule has no content to match). Input to a running command
// offers none.
func suggestionsFor(tool string, input json.RawMessage) []json.RawMessage {
	var rule map[string]string
	switch tool {
	case "Bash":
		var in struct {
			Command string `json:"command"`
		}
		if json.Unmarshal(input, &in) != nil || in.Command == "" {
			return nil
		}
		rule = map[string]string{"toolName": "Bash", "ruleContent": in.Command}
	case "apply_patch":
		rule = map[string]string{"toolName": "apply_patch"}
	default:
		return nil
	}
	b, err := json.Marshal(map[string]any{"type": "addRules", "rules": []any{rule}, "behavior": "allow", "destination": "session"})
	if err != nil {
		return nil
	}
	return []json.RawMessage{b}
}

func (r *codexRun) changesOf(item string) json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changes[item]
}

// editsWithin reports whether every file a change touches is in the
// task's directory (links resolved), outside Codex's state directory and
// outside any .git or .codex directory: what acceptEdits accepts without
// asking. A file elsewhere (Codex's config.toml, whose notify or MCP
// servers would run commands at its next start; a git hook) is asked for.
func editsWithin(changes json.RawMessage, cwd, stateDir string) bool {
	var cs []struct {
		Path string `json:"path"`
		Kind struct {
			MovePath *string `json:"move_path"`
		} `json:"kind"`
	}
	if cwd == "" || json.Unmarshal(changes, &cs) != nil || len(cs) == 0 {
		return false
	}
	root, err := realPath(cwd)
	if err != nil {
		return false
	}
	state := ""
	if stateDir != "" {
		if state, err = realPath(stateDir); err != nil {
			return false
		}
	}
	inside := func(p string) bool {
		if p == "" {
			return false
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		rp, err := realPath(p)
		if err != nil {
			return false
		}
		rel, err := filepath.Rel(root, rp)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return false
		}
		if state != "" && (rp == state || strings.HasPrefix(rp, state+"/")) {
			return false
		}
		for _, c := range strings.Split(rel, "/") {
			if c == ".git" || c == ".codex" {
				return false
			}
		}
		return true
	}
	for _, c := range cs {
		if !inside(c.Path) || (c.Kind.MovePath != nil && !inside(*c.Kind.MovePath)) {
			return false
		}
	}
	return true
}

// realPath is p with the links of its longest existing ancestor resolved
// (the rest does not exist yet, so it is no link).
func realPath(p string) (string, error) {
	p = filepath.Clean(p)
	rest := ""
	for {
		rp, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(rp, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

func validUTF8JSON(b []byte) bool { return utf8.Valid(b) && json.Valid(b) }

// toolAllowed: the task's tools, when it names some, include tool.
func (r *codexRun) toolAllowed(tool string) bool {
	if len(r.t.Tools) == 0 {
		return true
	}
	names := map[string][]string{"Bash": {"Bash", "exec_command"}, "write_stdin": {"Bash", "exec_command", "write_stdin"},
		"apply_patch": {"apply_patch", "Edit", "Write"}}[tool]
	for _, t := range r.t.Tools {
		for _, n := range names {
			if t == n {
				return true
			}
		}
	}
	return false
}

// bounded is a message Codex (or its endpoint) wrote, cut to a size fit
// for a task's error.
func bounded(s string) string {
	const max = 1024
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "..."
	}
	return s
}

// shellScript is the script of a command Codex runs as `SHELL -lc
// SCRIPT` (as it shows it, shell-quoted): what the model asked to run,
// and what Bash rules match. Any other command is returned whole.
func shellScript(command string) string {
	w, ok := shellWords(command)
	if !ok || len(w) != 3 {
		return command
	}
	// Only a system shell: the model chooses exec_command's shell, and
	// an allow rule for the script must not let it run a program of its
	// own named bash.
	switch w[0] {
	case "/bin/bash", "/usr/bin/bash", "/bin/sh", "/usr/bin/sh", "/bin/zsh", "/usr/bin/zsh", "/bin/dash", "/usr/bin/dash":
	default:
		return command
	}
	if w[1] != "-lc" && w[1] != "-c" {
		return command
	}
	return w[2]
}

// shellWords splits s as a POSIX shell splits words (quotes and
// backslashes; no expansions). ok is false on an unterminated quote or
// anything it does not understand as plain words.
func shellWords(s string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
				} else if s[i] == '$' || s[i] == '`' {
					return nil, false
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, false
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, false
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		case strings.IndexByte("|&;<>()$`\n*?[#~{}", c) >= 0:
			return nil, false
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}
