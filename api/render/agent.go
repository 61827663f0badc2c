package render

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// Bounds of the one-line forms of an agent's messages, in runes.
const (
	maxToolName = 80  // a tool's name
	maxToolLine = 160 // what a tool call does, on its line
	maxDenied   = 120 // what a tool use refused would have done
	maxText     = 200 // a reason, a tool's output or error, a result's error
)

// ToolName is a tool's name on one line, at most 80 runes; "tool" when
// the agent gave none.
func ToolName(name string) string {
	if name = OneLine(name); name == "" {
		return "tool"
	}
	return Cut(name, maxToolName)
}

// ToolSummary is what a tool call does, on one line (api.ToolSummary: a
// Bash command, the file a Read/Edit/Write touches, a URL, else its input
// as compact JSON); "" when its input says nothing. Not bounded: a
// front-end cuts it to its room.
func ToolSummary(name string, input json.RawMessage) string {
	return OneLine(api.ToolSummary(name, input))
}

// ToolLine is a tool call as one line: "> Bash ls -la".
func ToolLine(name string, input json.RawMessage) string {
	return strings.TrimRight("> "+ToolName(name)+" "+Cut(ToolSummary(name, input), maxToolLine), " ")
}

// DeniedLine is a tool use that did not run, never said as if it had:
// "! denied Bash ls: REASON".
func DeniedLine(name string, input json.RawMessage, reason string) string {
	what := ToolName(name)
	if s := ToolSummary(name, input); s != "" {
		what += " " + Cut(s, maxDenied)
	}
	if reason = OneLine(reason); reason == "" {
		reason = "no reason given"
	}
	return "! denied " + what + ": " + Cut(reason, maxText)
}

// FailedLine is a tool call that gave back an error: "! Bash failed:
// OUTPUT".
func FailedLine(name, output string) string {
	return "! " + ToolName(name) + " failed: " + Cut(OneLine(output), maxText)
}

// ToolResultLine is what a tool call gave back: "< Bash: OUTPUT".
func ToolResultLine(name, output string) string {
	return "< " + ToolName(name) + ": " + Cut(OneLine(output), maxText)
}

// ErrorLine is an error the agent (or its executor) reported: "error:
// TEXT".
func ErrorLine(text string) string { return "error: " + Cut(OneLine(text), 2*maxText) }

// OtherLine is a message of a kind a front-end shows only as it is:
// "[progress] {"p":1}".
func OtherLine(kind, text string) string {
	return "[" + Cut(OneLine(kind), maxToolName) + "] " + Cut(OneLine(text), maxText)
}

// ResultWords says a run's end, as its result message (or its task's
// record) says it: "error: TEXT" when it failed, the tool uses denied,
// tokens and cost; "done" when there is nothing to say.
func ResultWords(isError bool, text string, denied int, u *api.TokenUsage) string {
	var ws []string
	if isError {
		w := "error"
		if t := OneLine(text); t != "" {
			w += ": " + Cut(t, maxText)
		}
		ws = append(ws, w)
	}
	if denied > 0 {
		ws = append(ws, Denied(denied))
	}
	if u != nil && (u.InputTokens != 0 || u.OutputTokens != 0 || u.CostUSD > 0) {
		ws = append(ws, Usage(u))
	}
	if len(ws) == 0 {
		return "done"
	}
	return strings.Join(ws, ", ")
}

// ResultLine is ResultWords on a line of its own: "-- result: 2 tool uses
// denied, 120 tokens in, 30 out, $0.0042".
func ResultLine(isError bool, text string, denied int, u *api.TokenUsage) string {
	return "-- result: " + ResultWords(isError, text, denied, u)
}

// PartResult is ResultWords of a result message.
func PartResult(p api.AgentPart) string { return ResultWords(p.IsError, p.Text, p.Denied, p.Usage) }

// Denied is tool uses refused: "1 tool use denied", "3 tool uses denied".
func Denied(n int) string { return api.Count(n, "tool use") + " denied" }

// DeniedOfAgent says tool uses refused in a sentence: "1 tool use of the
// agent was denied", "3 tool uses of the agent were denied".
func DeniedOfAgent(n int) string {
	if n == 1 || n == -1 {
		return api.Count(n, "tool use") + " of the agent was denied"
	}
	return api.Count(n, "tool use") + " of the agent were denied"
}

// Tokens is the tokens an agent spent: "120 tokens in, 30 out, 7 cache
// read, 2 cache write"; "no tokens reported" when none were.
func Tokens(u *api.TokenUsage) string {
	if u == nil {
		return "no tokens reported"
	}
	s := strconv.FormatInt(u.InputTokens, 10) + " tokens in, " + strconv.FormatInt(u.OutputTokens, 10) + " out"
	if u.CacheReadTokens > 0 {
		s += ", " + strconv.FormatInt(u.CacheReadTokens, 10) + " cache read"
	}
	if u.CacheWriteTokens > 0 {
		s += ", " + strconv.FormatInt(u.CacheWriteTokens, 10) + " cache write"
	}
	return s
}

// Usage is tokens and cost (the cost when the agent gave one): "120
// tokens in, 30 out, 7 cache read, $0.0042"; "no tokens reported" when
// none were.
func Usage(u *api.TokenUsage) string {
	s := Tokens(u)
	if u != nil && u.CostUSD > 0 {
		s += ", " + dollars(u.CostUSD)
	}
	return s
}
