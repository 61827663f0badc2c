package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/orchestrd/orchestrd/api"
)

// LineMax bounds one line of an agent's output taken as one message; a
// longer line is split (the command kind) or refused (the structured
// kinds), and said so.
const LineMax = 1 << 20

// Command is the "command" kind: any command-line agent, one process per
// prompt. The prompt replaces an argument's {prompt}, else goes to its
// stdin. A stdout line that is a JSON object passes through with its
// "type" as the event type (a Claude Code "result" gives the task's token
// usage); any other line is text. Its stderr lines are reported errors,
// its exit code the task's status.
type Command struct{ Opts Options }

func (a *Command) Run(t Task, h Host) Result {
	env := t.Env
	if a.Opts.KeyEnv != "" {
		service := a.Opts.KeyService
		if service == "" {
			service = a.Opts.KeyEnv
		}
		key, err := h.APIKey(service)
		if err != nil {
			return Failed("no_api_key", "fetching the API key for %s: %v", service, err)
		}
		env = append(env, a.Opts.KeyEnv+"="+key)
	}
	argv := make([]string, len(a.Opts.Argv))
	onStdin := true
	for i, s := range a.Opts.Argv {
		if strings.Contains(s, "{prompt}") {
			s, onStdin = strings.ReplaceAll(s, "{prompt}", t.Prompt), false
		}
		argv[i] = s
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = t.Cwd, env
	stdin := "" // the prompt is an argument: stdin ends at once
	if onStdin {
		stdin = t.Prompt
	}
	cmd.Stdin = strings.NewReader(stdin)
	pipes, failed := t.Proc.StartPiped(cmd)
	if failed != nil {
		return *failed
	}
	outR, errR := pipes.Stdout, pipes.Stderr
	var usage *api.TokenUsage
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ReportStderr(errR, h)
	}()
	br := bufio.NewReaderSize(outR, 64<<10)
	for {
		line, err := ReadLine(br, LineMax)
		if len(line.B) > 0 || (err == nil && !line.Split) {
			typ, data, u := messageOf(line.B)
			if u != nil {
				usage = u
			}
			h.Report(typ, data)
		}
		if line.Split {
			h.ReportError("line_split", fmt.Sprintf("a stdout line over %d bytes was split into several messages", LineMax))
		}
		if err != nil {
			break
		}
	}
	wg.Wait()
	res := ExitResult(argv[0], cmd.Wait(), t.Proc)
	res.Usage = usage
	return res
}

// ReportStderr reports each line the agent writes on stderr as a
// report_error "stderr", until r ends.
func ReportStderr(r io.Reader, h Host) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		h.ReportError("stderr", sc.Text())
	}
}

// ExitResult is the result an agent's exit gives: cancelled when the task
// was stopped, completed on exit 0, else failed with exit_N.
func ExitResult(name string, werr error, p *Proc) Result {
	var ee *exec.ExitError
	switch {
	case p.Stopped():
		return Result{Status: "cancelled"}
	case werr == nil:
		return Result{Status: "completed"}
	case errors.As(werr, &ee):
		code := ee.ExitCode()
		msg := fmt.Sprintf("%s exited with code %d", name, code)
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			msg = fmt.Sprintf("%s was killed by %s", name, ws.Signal())
		}
		return Failed("exit_"+strconv.Itoa(code), "%s", msg)
	default:
		return Failed("wait_failed", "%v", werr)
	}
}

// Line is one line ReadLine read.
type Line struct {
	B     []byte
	Split bool // the line was longer than max: this is a part of it
}

// ReadLine reads one line (without its newline) of at most max bytes.
func ReadLine(br *bufio.Reader, max int) (Line, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		buf = append(buf, frag...)
		if err == nil {
			return Line{B: bytes.TrimRight(buf, "\r\n")}, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(buf) >= max {
				return Line{B: buf, Split: true}, nil
			}
			continue
		}
		return Line{B: buf}, err
	}
}

// messageOf turns one stdout line into a message: a JSON object passes
// through with its "type" as event_type (and a Claude Code "result" line
// gives the token usage); anything else is text.
func messageOf(line []byte) (string, json.RawMessage, *api.TokenUsage) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		var head struct {
			Type  string  `json:"type"`
			Cost  float64 `json:"total_cost_usd"`
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
				CacheReadTokens: head.Usage.CacheReadInputTokens, CacheWriteTokens: head.Usage.CacheCreationInputTokens,
				CostUSD: head.Cost}
		}
		return typ, json.RawMessage(trimmed), u
	}
	data, _ := json.Marshal(map[string]any{"delta": map[string]string{"text": string(line) + "\n"}})
	return "content_block_delta", data, nil
}
