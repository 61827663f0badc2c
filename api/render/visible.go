package render

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Visible shows what a terminal or a bidi-aware page would act on instead
// of showing it: C0 controls but tab and newline as their control
// pictures (␛), DEL as ␡; C1 controls, every format character (the bidi
// embeddings, overrides and isolates that reorder what is read, "Trojan
// Source"; zero-width and direction marks) and the line and paragraph
// separators as ⟨U+XXXX⟩; invalid UTF-8 as U+FFFD. Tab and newline stay.
// What remains is text: the dashboard escapes it for HTML, a chat sends
// it as plain text. Every front-end shows an agent's text through it.
func Visible(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || shownAsMark(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20:
			b.WriteRune(0x2400 + r)
		case r == 0x7f:
			b.WriteRune(0x2421)
		case shownAsMark(r):
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteRune(r) // RuneError included: invalid bytes show as �
		}
	}
	return b.String()
}

// shownAsMark: r is not shown as it is (Visible).
func shownAsMark(r rune) bool {
	if r < utf8.RuneSelf {
		return (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}
