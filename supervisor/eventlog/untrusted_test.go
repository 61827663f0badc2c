package eventlog

import (
	"strings"
	"testing"
)

func TestIdent(t *testing.T) {
	for in, want := range map[string]string{
		"anthropic":             "anthropic",
		"ANTHROPIC_API_KEY":     "ANTHROPIC_API_KEY",
		"task_create":           "task_create",
		"":                      "(0 bytes, sha256 e3b0c44298fc1c14)",
		"sk-ant-api03 leak":     "(17 bytes, sha256 ",
		"a\nb":                  "(3 bytes, sha256 ",
		"\x1b[31mred":           "(8 bytes, sha256 ",
		strings.Repeat("a", 65): "(65 bytes, sha256 ",
	} {
		if got := Ident(in); !strings.HasPrefix(got, want) || (want == in && got != in) {
			t.Errorf("Ident(%q) = %q, want %q...", in, got, want)
		}
		if got := Ident(in); got != in && strings.Contains(got, in) && in != "" {
			t.Errorf("Ident(%q) = %q still holds the text", in, got)
		}
	}
}

// Whatever the text, Ident gives it back only when it is a plain
// identifier, and never holds a byte outside the plain set and "( ),".
func FuzzIdent(f *testing.F) {
	for _, s := range []string{"anthropic", "a b", "\x00", "é", "../../etc/passwd", strings.Repeat("x", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Ident(s)
		if got == s {
			if !plain(s) {
				t.Fatalf("Ident(%q) returned text that is not plain", s)
			}
			return
		}
		for i := 0; i < len(got); i++ {
			c := got[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '(' || c == ')' || c == ' ' || c == ',') {
				t.Fatalf("Ident(%q) = %q holds %q", s, got, c)
			}
		}
	})
}
