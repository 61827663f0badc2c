// Package render says records to people: approvals, an agent's messages
// (api.AgentPart, as api.DecodeAgentMessage reads a session's messages)
// and tasks, as one-line summaries, tool calls, durations, states and
// costs. The one renderer the CLI, the dashboard and the chat share.
//
// What an agent or a requester wrote is hostile. Every one-line form here
// is one line of printable text: OneLine makes newlines " ⏎ " and every
// other control character (C0, DEL, C1, a line or paragraph separator) a
// space, a format character (a bidi override) a visible mark, and bytes
// that are not UTF-8 U+FFFD; Visible does the same to text of many lines.
// That is not all a front-end owes such text: the dashboard escapes it for
// HTML (html/template), the CLI writes an agent's streamed text through
// its terminal escaping.
package render

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// OneLine puts s on one line, trimmed: newlines (\n, \r\n) become " ⏎ ",
// every other control character and a line or paragraph separator a
// space, a format character (a bidi override, a zero-width mark) its
// ⟨U+XXXX⟩ (Visible), invalid UTF-8 U+FFFD.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\n", " ⏎ ")
	return Visible(strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)))
}

// Cut shortens s to n runes, the last one an ellipsis ("" for n < 1).
func Cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Age is how long ago, coarse, for a table's column: "42s", "5m", "3h"
// (under two days), "4d".
func Age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	default:
		return strconv.Itoa(int(d.Hours()/24)) + "d"
	}
}

// Duration is a duration for people, to the unit that matters: "250ms",
// "1.5s", "3m05s", "2h05m" (under two days), "4d"; "0s" when negative.
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m" + twoDigits(int(d.Seconds())%60) + "s"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h" + twoDigits(int(d.Minutes())%60) + "m"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// When is a moment in local time, to the second: "2026-11-29 14:05:09";
// "-" for the zero time.
func When(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// StateWords is a state's code in words: "timed_out" is "timed out".
func StateWords(state string) string { return strings.ReplaceAll(OneLine(state), "_", " ") }
