package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// runOnPty runs the CLI with stdout and stderr on a fresh pseudo-terminal
// (openPty) and stdin from stdin; it returns what reached the terminal
// and the exit code.
func runOnPty(t *testing.T, stdin io.Reader, args ...string) (string, int) {
	t.Helper()
	master, slave := openPty(t)
	var out testio.SyncBuffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, master); close(copied) }() // ends with EIO once every slave fd is closed
	defer func() { slave.Close(); master.Close(); <-copied }()
	cmd := exec.Command(binary, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, slave, slave
	code := exitCode(t, cmd.Run())
	slave.Close()
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatalf("the pty's output did not end after %v exited", args)
	}
	return out.String(), code
}

// An agent's text (an OSC window title, colours, a C1 CSI, a carriage
// return) reaches a terminal escaped from prompt, session and chat, on
// stdout and stderr alike, newlines and tabs kept; piped it stays byte for
// byte what the agent wrote.
func TestAgentTextEscapedOnATerminal(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, chatConfig(t))
	const raw = "\x1b]0;pwned\x07\x1b[31mred\x1b[0m\u009b2J\tover\rend\n"
	const shown = `\x1b]0;pwned\x07\x1b[31mred\x1b[0m\xc2\x9b2J` + "\tover" + `\x0d` + "end\n"
	text, _ := json.Marshal(raw)
	say := `{"op":"message","text":` + string(text) + `}`
	fail := `{"op":"error","code":"x","message":` + string(text) + `}`
	// What reached the terminal: no escape, BEL, C1 or lone carriage
	// return (the terminal itself writes each newline as \r\n).
	onTerminal := func(what, out string) {
		t.Helper()
		bare := strings.ReplaceAll(out, "\r\n", "\n")
		if strings.ContainsAny(bare, "\x1b\x07\r\u009b") {
			t.Fatalf("%s: raw control characters reached the terminal: %q", what, out)
		}
		if !strings.Contains(bare, shown) {
			t.Fatalf("%s: terminal shows %q, want %q in it", what, out, shown)
		}
	}
	prompt := []string{"--home", d.home, "prompt", "--executor", "scripted", "--cwd", d.home, script(say, fail)}

	out, errOut, code := runCLI(t, prompt...)
	if code != 0 || out != raw || !strings.Contains(errOut, raw) {
		t.Fatalf("prompt piped: exit %d, stdout %q, stderr %q; want the agent's bytes as they are", code, out, errOut)
	}
	out, code = runOnPty(t, nil, prompt...)
	if code != 0 {
		t.Fatalf("prompt on a terminal: exit %d\n%q", code, out)
	}
	onTerminal("prompt", out)
	if strings.Count(strings.ReplaceAll(out, "\r\n", "\n"), shown) != 2 {
		t.Fatalf("prompt on a terminal: want the text on stdout and the error on stderr, got %q", out)
	}

	_, session := d.execute(api.TaskSpec{Prompt: script(say)})
	eventually(t, 20*time.Second, "the session's message stored", func() bool { return len(d.session(session)) == 1 })
	out, errOut, code = runCLI(t, "--home", d.home, "session", session)
	if code != 0 || !strings.HasSuffix(out, "\n"+raw) {
		t.Fatalf("session piped: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, code = runOnPty(t, nil, "--home", d.home, "session", session)
	if code != 0 {
		t.Fatalf("session on a terminal: exit %d\n%q", code, out)
	}
	onTerminal("session", out)

	var o, e bytes.Buffer
	chat := exec.Command(binary, "chat", "--home", d.home, "--cwd", d.home)
	chat.Stdin, chat.Stdout, chat.Stderr = strings.NewReader(script(say)+"\n"), &o, &e
	if err := chat.Run(); err != nil || o.String() != raw {
		t.Fatalf("chat piped: %v, stdout %q, stderr %q", err, o.String(), e.String())
	}
	out, code = runOnPty(t, strings.NewReader(script(say)+"\n"), "chat", "--home", d.home, "--cwd", d.home)
	if code != 0 {
		t.Fatalf("chat on a terminal: exit %d\n%q", code, out)
	}
	onTerminal("chat", out)
}

// Whatever the text, escapeControls leaves valid UTF-8 with no control
// character but tab (and newline when lines), and printable no newline.
func FuzzEscapeControls(f *testing.F) {
	for _, s := range []string{"plain", "\x1b]0;t\x07", "a\nb\tc\r", "\u009b2J", "\xff\xfe", "\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, lines := range []bool{false, true} {
			got := escapeControls(s, lines)
			if !utf8.ValidString(got) {
				t.Fatalf("escapeControls(%q, %v) = %q: not UTF-8", s, lines, got)
			}
			for _, r := range got {
				if (r < ' ' && r != '\t' && !(r == '\n' && lines)) || r == 0x7f || (r >= 0x80 && r < 0xa0) {
					t.Fatalf("escapeControls(%q, %v) = %q: keeps %U", s, lines, got, r)
				}
			}
			if lines && strings.Count(got, "\n") != strings.Count(s, "\n") {
				t.Fatalf("escapeControls(%q, true) = %q: newlines not kept", s, got)
			}
		}
	})
}
