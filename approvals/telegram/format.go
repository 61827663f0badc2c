package telegram

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

// Bounds of a message's parts (UTF-16 units, as Telegram counts).
const (
	inputBudget = 1500 // a tool's input, shown
	planInline  = 3000 // a plan longer than this goes as a document
	contextCut  = 300  // the agent's last words
)

// units is s's length as Telegram counts it (UTF-16 code units).
func units(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r > 0xFFFF {
			n++
		}
	}
	return n
}

// clip cuts s to at most n UTF-16 units, saying how much was left out.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if units(s) <= n {
		return s
	}
	var b strings.Builder
	u := 0
	for _, r := range s {
		w := 1
		if r > 0xFFFF {
			w = 2
		}
		if u+w > n-40 {
			break
		}
		b.WriteRune(r)
		u += w
	}
	return b.String() + fmt.Sprintf("\n… (cut: %d more bytes)", len(s)-b.Len())
}

// safe makes the agent's (or a person's) text harmless to show
// (render.Visible): a control character (but a newline or a tab), an
// invisible format character (bidi overrides and isolates, zero-width
// marks) and a line or paragraph separator are shown as marks, so the
// text cannot reorder or hide what surrounds it.
func safe(s string) string { return render.Visible(s) }

// oneLine is safe(s) on one line: a newline shows as ⏎.
func oneLine(s string) string {
	return strings.ReplaceAll(safe(s), "\n", "⏎")
}

// gutter marks each line of text the agent wrote, so none can pass for
// the bot's own (a decision, a button's label, the request's id line).
const gutter = "┃ "

// quoted is safe(s) with each line behind the gutter, cut to n units.
func quoted(s string, n int) string {
	lines := strings.Split(safe(s), "\n")
	for i, l := range lines {
		lines[i] = gutter + l
	}
	return clip(strings.Join(lines, "\n"), n)
}

// buttons is the keyboard of a (rows of [label, action]).
func buttons(a api.Approval) [][2]string {
	switch a.Kind {
	case api.KindPlan:
		return [][2]string{{"✅ Approve", ActAllow}, {"❌ Reject", ActDeny}, {"🔁 Iterate", ActReply}}
	case api.KindMerge:
		return [][2]string{{"✅ Merge", ActAllow}, {"❌ Reject", ActDeny}}
	}
	bs := [][2]string{{"✅ Allow", ActAllow}, {"❌ Deny", ActDeny}, {"💬 Reply", ActReply}}
	if len(a.PermissionSuggestions) > 0 {
		bs = append(bs, [2]string{"🔓 Always Allow", ActAlways})
	}
	return bs
}

// keyboard is the inline keyboard of a, its buttons carrying token.
func keyboard(a api.Approval, token string) map[string]any {
	var row []map[string]string
	for _, b := range buttons(a) {
		row = append(row, map[string]string{"text": b[0], "callback_data": EncodeCallback(token, b[1])})
	}
	return map[string]any{"inline_keyboard": [][]map[string]string{row}}
}

// planIsDocument says whether a's plan goes as a document.
func planIsDocument(a api.Approval) bool {
	return a.Kind == api.KindPlan && units(a.Content) > planInline
}

// text is the message of pending approval a: what is asked, where, and
// (a plan) the plan unless it goes as a document. Always within MaxText.
func text(a api.Approval) string {
	var b strings.Builder
	project := filepath.Base(a.Cwd)
	switch a.Kind {
	case api.KindPlan:
		b.WriteString("📋 Plan")
		if a.LoopID != "" {
			b.WriteString(" of loop " + oneLine(a.LoopID))
		}
		if n := specsCount(a.Specs); n > 0 {
			fmt.Fprintf(&b, " (%d specs)", n)
		}
		b.WriteString("\n\n")
		if planIsDocument(a) {
			b.WriteString("The plan is this document (plan.md).")
		} else {
			b.WriteString(quoted(a.Content, planInline+600))
		}
	case api.KindMerge:
		b.WriteString("🔀 Merge")
		if a.LoopID != "" {
			b.WriteString(" of loop " + oneLine(a.LoopID))
		}
		b.WriteString("\n\n" + quoted(a.Content, inputBudget))
	default:
		if a.Cwd != "" {
			b.WriteString("📋 " + clip(oneLine(project), 100) + "\n\n")
		}
		b.WriteString("🔧 " + clip(oneLine(a.ToolName), 100) + "\n")
		b.WriteString(toolInput(a.ToolName, a.ToolInput))
		if a.AssistantContext != "" {
			b.WriteString("\n\n💭\n" + quoted(a.AssistantContext, contextCut))
		}
	}
	b.WriteString("\n")
	if a.Cwd != "" {
		b.WriteString("\n📁 " + clip(oneLine(a.Cwd), 300))
	}
	if a.SessionID != "" {
		b.WriteString("\n🆔 Session: " + clip(oneLine(a.SessionID), 12))
	}
	b.WriteString("\n🔑 " + a.ID + " · until " + a.Deadline.UTC().Format("15:04:05Z"))
	return clip(b.String(), MaxText-200) // room for the outcome an edit adds
}

// toolInput shows a tool's input: a command as code, an edit as a short
// diff, a file written by its path and size, anything else as JSON; long
// input cut with a note.
func toolInput(tool string, in json.RawMessage) string {
	var m map[string]any
	_ = json.Unmarshal(in, &m)
	str := func(k string) string { s, _ := m[k].(string); return s }
	switch {
	case str("command") != "":
		return quoted(str("command"), inputBudget)
	case str("old_string") != "" || str("new_string") != "":
		var d strings.Builder
		for _, l := range strings.Split(str("old_string"), "\n") {
			d.WriteString("- " + l + "\n")
		}
		for _, l := range strings.Split(str("new_string"), "\n") {
			d.WriteString("+ " + l + "\n")
		}
		return "📄 " + clip(oneLine(str("file_path")), 200) + "\n" + quoted(strings.TrimRight(d.String(), "\n"), inputBudget)
	case str("file_path") != "" && str("content") != "":
		return "📄 " + clip(oneLine(str("file_path")), 200) + fmt.Sprintf(" (%d bytes)", len(str("content")))
	case len(m) == 0:
		return ""
	}
	out, _ := json.MarshalIndent(m, "", " ")
	return quoted(string(out), inputBudget)
}

// outcome is the line an ended approval's message gets: what was decided,
// by whom, when.
func outcome(a api.Approval) string {
	r := a.Resolution
	if r == nil {
		return "\n\n⏹ " + string(a.State)
	}
	var what string
	switch a.State {
	case api.ApprovalAllowed:
		what = "✅ Allowed"
		if a.Kind == api.KindPlan {
			what = "✅ Approved"
		}
	case api.ApprovalAlwaysAllowed:
		what = "🔓 Always allowed"
	case api.ApprovalDenied:
		what = "❌ Denied"
		if a.Kind != api.KindTool {
			what = "❌ Rejected"
		}
	case api.ApprovalReplied:
		what = "💬 Replied"
		if a.Kind == api.KindPlan {
			what = "🔁 Sent back to iterate"
		}
	case api.ApprovalTimedOut:
		what = "⌛ Timed out"
	case api.ApprovalCancelled:
		what = "⏹ Cancelled (" + oneLine(r.Reason) + ")"
	default:
		what = string(a.State)
	}
	s := "\n\n" + what
	if r.By != "" && a.State != api.ApprovalTimedOut {
		s += " by " + r.Who()
	}
	if !r.At.IsZero() {
		s += " at " + r.At.UTC().Format(time.RFC3339)
	}
	if m := r.UserMessage; m != "" {
		s += "\n“" + clip(oneLine(m), 150) + "”"
	}
	return s
}

// edited is the text an ended approval's message is edited to.
func edited(a api.Approval) string {
	return clip(text(a)+outcome(a), MaxText)
}

// caption is a long plan's document's caption: its message, within
// Telegram's 1024 characters with room for the outcome an edit adds.
func caption(a api.Approval) string { return clip(text(a), MaxCaption-300) }

// editedCaption is the caption an ended long plan's document is edited to.
func editedCaption(a api.Approval) string { return clip(caption(a)+outcome(a), MaxCaption) }

func specsCount(s json.RawMessage) int {
	var xs []json.RawMessage
	if json.Unmarshal(s, &xs) != nil {
		return 0
	}
	return len(xs)
}
