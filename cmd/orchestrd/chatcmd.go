package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/wire"
)

const chatUsage = `orchestrd chat [--home DIR] [--cwd DIR] [--new]

A conversation with the agent on the executor pool [loops] chat_executor
names (the daemon's one chat, as Loopr's TUI has it): each line read from
stdin is sent (chat.send) and the reply streamed to stdout as it comes,
each tool call as one line ("> Bash ls"). Ctrl-C cancels the reply being
streamed; Ctrl-C with no reply streaming, or the end of stdin (once the
last reply is over), leaves. --new starts a new conversation (chat.clear)
first. Exits 0 at the end of stdin, 130 when left with Ctrl-C, 1 when the
chat is off or the daemon goes.`

// maxChatLine bounds one line of stdin: a message.
const maxChatLine = 1 << 20

func cmdChat(args []string, stdout, stderr io.Writer) int {
	// An agent's text, on a terminal, with its control characters escaped.
	stdout, stderr = terminalSafe(stdout), terminalSafe(stderr)
	fs := newFlags("chat")
	home := homeFlag(fs)
	cwd := fs.String("cwd", "", "working `DIR` of the agent (default: the current directory)")
	fresh := fs.Bool("new", false, "start a new conversation first")
	if code, ok := parseFlags(fs, chatUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, chatUsage, stderr, "unexpected argument %q (messages are read from stdin)", fs.Arg(0))
	}
	dir, err := workDir(*cwd)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd: %v\n", err)
		return exitFailure
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	if err := call(c, "events.subscribe", map[string]any{"kinds": []string{"chat.*", "events.dropped"}}, nil); err != nil {
		return callErr(stderr, err)
	}
	if *fresh {
		if err := call(c, "chat.clear", nil, nil); err != nil {
			return callErr(stderr, err)
		}
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	s := &chatSession{c: c, stdout: stdout, stderr: stderr, cwd: dir, lineStart: true,
		interactive: isTerminal(os.Stdin)}
	return s.run(readLines(os.Stdin, stderr), sig)
}

// readLines sends each line of r, then closes the channel at its end. The
// goroutine lives as long as the command: it may be blocked in a read of
// stdin when the command leaves.
func readLines(r io.Reader, stderr io.Writer) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxChatLine)
		for sc.Scan() {
			lines <- sc.Text()
		}
		if err := sc.Err(); err != nil {
			fmt.Fprintf(stderr, "orchestrd: reading stdin: %v\n", err)
		}
	}()
	return lines
}

// chatSession is one `orchestrd chat`: a loop over stdin's lines, the
// chat's events and Ctrl-C.
type chatSession struct {
	c              *client.Client
	stdout, stderr io.Writer
	cwd            string
	interactive    bool
	lineStart      bool   // stdout is at the start of a line
	streaming      string // the message whose reply streams, "" when none
	cancelled      bool   // Ctrl-C asked to cancel it
}

// chatEventData is what the chat's events carry.
type chatEventData struct {
	Text      string          `json:"text"`
	Done      bool            `json:"done"`
	MessageID string          `json:"message_id"`
	State     api.TaskState   `json:"state"`
	Error     *api.TaskError  `json:"error"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	Output    string          `json:"output"`
	IsError   bool            `json:"is_error"`
	Denied    bool            `json:"denied"`
	Dropped   uint64          `json:"dropped"`
}

func (s *chatSession) run(lines <-chan string, sig <-chan os.Signal) int {
	eof := false
	s.prompt()
	for {
		if eof && s.streaming == "" {
			return exitOK
		}
		in := lines
		if s.streaming != "" || eof {
			in = nil // one message at a time: the next line waits for the reply's end
		}
		select {
		case line, ok := <-in:
			if !ok {
				eof = true
				continue
			}
			if strings.TrimSpace(line) == "" {
				s.prompt()
				continue
			}
			if code, stop := s.send(line); stop {
				return code
			}
		case ev, ok := <-s.c.Events():
			if !ok {
				s.endLine()
				fmt.Fprintln(s.stderr, "orchestrd: the daemon closed the connection")
				return exitFailure
			}
			s.event(ev)
		case <-sig:
			if s.streaming == "" || s.cancelled {
				s.endLine()
				return exitCancelled
			}
			s.cancelled = true
			if err := call(s.c, "chat.cancel", nil, nil); err != nil {
				return callErr(s.stderr, err)
			}
		}
	}
}

// send sends one message; stop when the chat cannot go on.
func (s *chatSession) send(line string) (int, bool) {
	var res struct {
		MessageID string `json:"message_id"`
	}
	if err := call(s.c, "chat.send", map[string]any{"message": line, "cwd": s.cwd}, &res); err != nil {
		// A message refused (bad, or another client's reply streaming)
		// lets the next line be tried; a chat that is off does not.
		var we *wire.Error
		if errors.As(err, &we) && (we.Code == api.CodeInvalidParams || we.Code == api.CodeQueueFull ||
			we.Code == api.CodeInvalidState && !strings.Contains(we.Message, "chat_executor")) {
			fmt.Fprintf(s.stderr, "orchestrd: %s\n", we.Message)
			s.prompt()
			return 0, false
		}
		return callErr(s.stderr, err), true
	}
	s.streaming, s.cancelled = res.MessageID, false
	return 0, false
}

// event shows one of the chat's events: the current reply's only (the
// chat is the daemon's: another client's messages stream too).
func (s *chatSession) event(ev wire.Event) {
	var d chatEventData
	if json.Unmarshal(ev.Data, &d) != nil {
		return
	}
	if ev.Event == "events.dropped" {
		s.endLine()
		fmt.Fprintf(s.stderr, "orchestrd: %s dropped: the reply shown may miss parts (orchestrd session shows it whole)\n", api.Count(int(d.Dropped), "event"))
		return
	}
	if s.streaming == "" || d.MessageID != s.streaming {
		return
	}
	switch ev.Event {
	case "chat.chunk":
		if d.Text != "" {
			io.WriteString(s.stdout, d.Text)
			s.lineStart = strings.HasSuffix(d.Text, "\n")
		}
		if d.Done {
			s.endLine()
			switch {
			case d.State == api.TaskCancelled || s.cancelled:
				fmt.Fprintln(s.stderr, "orchestrd: reply cancelled")
			case d.State != api.TaskCompleted && d.State != "":
				msg := string(d.State)
				if d.Error != nil {
					msg += ": " + render.TaskError(d.Error)
				}
				fmt.Fprintf(s.stderr, "orchestrd: the reply ended %s\n", msg)
			}
			s.streaming, s.cancelled = "", false
			s.prompt()
		}
	case "chat.tool_call":
		s.endLine()
		fmt.Fprintln(s.stdout, render.ToolLine(d.Tool, d.Input))
	case "chat.tool_result":
		s.endLine()
		switch {
		case d.Denied:
			fmt.Fprintln(s.stdout, render.DeniedLine(d.Tool, nil, d.Output))
		case d.IsError:
			fmt.Fprintln(s.stdout, render.FailedLine(d.Tool, d.Output))
		default:
			fmt.Fprintln(s.stdout, render.ToolResultLine(d.Tool, d.Output))
		}
	}
}

func (s *chatSession) endLine() {
	if !s.lineStart {
		io.WriteString(s.stdout, "\n")
		s.lineStart = true
	}
}

// prompt shows where to type, on a terminal.
func (s *chatSession) prompt() {
	if s.interactive {
		io.WriteString(s.stderr, "you> ")
	}
}
