package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// conversationText is what prompt and session show of the test executor's
// conversation (a built-in agent kind's messages): text streamed in
// pieces on one line, each tool call one line, the denial said as one
// (never as if the tool ran), the tool the agent refused itself said as
// failed, the result's line with the denials, tokens and cost.
const conversationText = "I'll list the files.\n" +
	"> Bash ls -la\n" +
	"> Bash rm -rf build\n" +
	"! denied Bash rm -rf build: not the build dir\n" +
	"> Write /etc/motd\n" +
	"! Write failed: Claude requested permissions to write to /etc/motd, but you haven't granted it yet.\n" +
	"Done <b>bold</b> \x1b[31mred\n" +
	"-- result: 1 tool use denied, 120 tokens in, 30 out, $0.0042\n"

// An agent's conversation (the api.Msg* messages a built-in kind reports)
// reaches orchestrd prompt and session through the real daemon as one
// conversation; --verbose adds thinking, the tool results and the usage;
// --json prints each message as stored, the agent's raw line with it.
func TestPromptShowsAgentConversation(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\n"))
	conv := script(`{"op":"conversation"}`)
	out, errs, code := runCLI(t, "--home", d.home, "prompt", "--executor", "scripted", "--cwd", shortTemp(t), conv)
	if code != 0 || out != conversationText {
		t.Fatalf("prompt: exit %d, stderr %q\nstdout %q\nwant   %q", code, errs, out, conversationText)
	}

	out, errs, code = runCLI(t, "--home", d.home, "prompt", "--verbose", "--executor", "scripted", "--cwd", shortTemp(t), conv)
	want := "[thinking] Let me look.\n" +
		strings.Replace(strings.Replace(conversationText,
			"> Bash ls -la\n", "> Bash ls -la\n< Bash: a.go ⏎ b.go\n", 1),
			"-- result:", "[usage] 120 tokens in, 30 out, $0.0042\n-- result:", 1)
	if code != 0 || out != want {
		t.Fatalf("prompt --verbose: exit %d, stderr %q\nstdout %q\nwant   %q", code, errs, out, want)
	}

	out, errs, code = runCLI(t, "--home", d.home, "prompt", "--json", "--executor", "scripted", "--cwd", shortTemp(t), conv)
	if code != 0 {
		t.Fatalf("prompt --json: exit %d, stderr %q", code, errs)
	}
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Event string `json:"event"`
			Data  struct {
				EventType string          `json:"event_type"`
				EventData json.RawMessage `json:"event_data"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("prompt --json: a line that is not JSON: %q", l)
		}
		if ev.Event != "task.message" {
			continue
		}
		types = append(types, ev.Data.EventType)
		var raw struct {
			Raw json.RawMessage `json:"raw"`
		}
		if json.Unmarshal(ev.Data.EventData, &raw) != nil || len(raw.Raw) == 0 {
			t.Fatalf("prompt --json: a message without its raw line: %s", l)
		}
	}
	if got := strings.Join(types, " "); got != "thinking text text tool_call tool_result tool_call permission_denied tool_call tool_result text usage result" {
		t.Fatalf("prompt --json: messages %s", got)
	}

	id, session := d.execute(api.TaskSpec{Prompt: conv})
	d.waitTask(id)
	out, errs, code = runCLI(t, "--home", d.home, "session", session)
	if want := "--- task " + id + "\n" + conversationText; code != 0 || out != want {
		t.Fatalf("session: exit %d, stderr %q\nstdout %q\nwant   %q", code, errs, out, want)
	}
}

// A built-in agent's failures are said in words: the usage limit, a
// refused key.
func TestPromptSaysAgentFailures(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, execConfig(t, "instances = 1\n"))
	for _, c := range []struct{ code, message, words string }{
		{api.TaskErrUsageLimit, "429 from the endpoint", "usage_limit: the agent hit its provider's rate or usage limit (429 from the endpoint)"},
		{api.TaskErrAuthFailed, "401 from the endpoint", "auth_failed: the agent's provider refused its key (see the pool's secrets) (401 from the endpoint)"},
	} {
		s := script(`{"op":"status","status":"failed","code":"` + c.code + `","message":"` + c.message + `"}`)
		_, errs, exit := runCLI(t, "--home", d.home, "prompt", "--executor", "scripted", "--cwd", shortTemp(t), s)
		if exit != exitFailure || !strings.Contains(errs, " failed: "+c.words+"\n") {
			t.Fatalf("prompt failing %s: exit %d, stderr %q", c.code, exit, errs)
		}
	}
}

// The chat shows a built-in agent's conversation as prompt does: text
// streamed on one line, tool calls, their results, the denial and the
// tool the agent refused itself said as such.
func TestChatShowsAgentConversation(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, chatConfig(t))
	out, errs, code := runCLIWith(t, "", strings.NewReader(script(`{"op":"conversation"}`)+"\n"), "chat", "--home", d.home)
	want := "I'll list the files.\n" +
		"> Bash ls -la\n" +
		"< Bash: a.go ⏎ b.go\n" +
		"> Bash rm -rf build\n" +
		"! denied Bash: not the build dir\n" +
		"> Write /etc/motd\n" +
		"! Write failed: Claude requested permissions to write to /etc/motd, but you haven't granted it yet.\n" +
		"Done <b>bold</b> \x1b[31mred\n"
	if code != 0 || out != want {
		t.Fatalf("chat: exit %d, stderr %q\nstdout %q\nwant   %q", code, errs, out, want)
	}
}
