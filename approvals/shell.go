package approvals

import (
	"errors"
	"fmt"
	"strings"
)

// A Bash command is split as the shell would read it, far enough to judge
// it against a rule, and no further: what the splitter cannot read for
// certain is an error, and what it reads but cannot vouch for makes the
// command opaque. Either way no allow rule answers it.
//
// It reads POSIX sh as Bash does: single quotes, double quotes (where
// $(...), `...` and $ stay active), $'...', backslashes, line
// continuations, comments, the operators ; & && || | |& and newlines,
// subshells ( ... ), $(...), `...`, <(...) and >(...), ${NAME}, and
// redirections. A command is opaque when it holds
//   - a command substitution, backticks, a process substitution, an
//     arithmetic expansion (all $(...) to the splitter);
//   - a redirection to or from anything but /dev/null (>, >>, >|, <, <>,
//     &>, &>>, >&FILE), a heredoc (<<, <<-) or a here-string (<<<); a
//     duplication (2>&1, >&2, <&0, >&-) and /dev/null are fine, and left out
//     of the part's words;
//   - a subshell or a group ({ ...; }), a shell keyword (if, for, while,
//     !, [[, time, ...) as a command word;
//   - a command word that is not plain: an assignment prefix (FOO=bar git
//     status: the environment changes what git does), an expansion ($GIT),
//     quotes, a glob, a brace or a tilde;
//   - a comment (the shells that may run it do not all agree on one);
//   - a command that is only redirections.
//
// It is an error (nothing matches, deny rules but on the whole command)
// when a quote, a substitution or a subshell is not closed, an operator
// has no command on one side (;; included), a ( stands in a word (zsh's
// glob qualifiers run code), ${...} holds more than a name (${x:-$(id)}),
// $[...] is met, the command holds a control character other than tab and
// newline, or nesting goes deeper than maxShellDepth.

// maxShellDepth bounds nested substitutions and subshells.
const maxShellDepth = 32

// shellCommand is a Bash command split.
type shellCommand struct {
	// parts are its simple commands in the order they end: those inside
	// substitutions and subshells come before the command that holds them.
	parts []shellPart
	// opaque says why no allow rule may answer the command ("" if none).
	opaque string
	// err says why it could not be read for certain; parts then holds
	// those read before.
	err error
}

// shellPart is one simple command.
type shellPart struct {
	// words are as written (quotes kept, line continuations dropped),
	// its /dev/null and duplication redirections left out.
	words []string
}

// text is the part as a rule reads it: its words, one space apart.
func (p shellPart) text() string { return strings.Join(p.words, " ") }

// command is text without the assignments and shell keywords in front
// (FOO=1 rm -rf x is rm -rf x to a deny rule).
func (p shellPart) command() string {
	w := p.words
	for len(w) > 0 && (shellKeywords[w[0]] || isAssignment(w[0])) {
		w = w[1:]
	}
	return strings.Join(w, " ")
}

// every reports whether ok accepts the text of every part of a command
// read for certain, none opaque. This is what an allow rule asks.
func (c *shellCommand) every(ok func(string) bool) bool {
	if c.err != nil || c.opaque != "" || len(c.parts) == 0 {
		return false
	}
	for _, p := range c.parts {
		if !ok(p.text()) {
			return false
		}
	}
	return true
}

// any reports whether ok accepts any part, nested ones included, by its
// text or its command. This is what a deny rule asks.
func (c *shellCommand) any(ok func(string) bool) bool {
	for _, p := range c.parts {
		if ok(p.text()) || ok(p.command()) {
			return true
		}
	}
	return false
}

// shellKeywords are Bash's reserved words (and !), which never start a
// simple command a rule could answer.
var shellKeywords = map[string]bool{
	"!": true, "{": true, "}": true, "[[": true, "]]": true, "case": true, "coproc": true, "do": true, "done": true,
	"elif": true, "else": true, "esac": true, "fi": true, "for": true, "function": true, "if": true, "in": true,
	"select": true, "then": true, "time": true, "until": true, "while": true,
}

// splitShell splits s.
func splitShell(s string) *shellCommand {
	c := &shellCommand{}
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < 0x20 && b != '\t' && b != '\n') || b == 0x7f {
			c.err = fmt.Errorf("a control character (%#x) at byte %d", b, i)
			return c
		}
	}
	p := &shellParser{s: s, out: c}
	if err := p.list(0); err != nil {
		c.err = err
	}
	return c
}

type shellParser struct {
	s     string
	i     int
	depth int
	out   *shellCommand
}

func (p *shellParser) eof() bool { return p.i >= len(p.s) }

// at is the byte at p.i+k, 0 past the end.
func (p *shellParser) at(k int) byte {
	if p.i+k < len(p.s) {
		return p.s[p.i+k]
	}
	return 0
}

func (p *shellParser) opaque(why string) {
	if p.out.opaque == "" {
		p.out.opaque = why
	}
}

// blanks skips spaces, tabs and line continuations.
func (p *shellParser) blanks() {
	for !p.eof() {
		switch {
		case p.s[p.i] == ' ' || p.s[p.i] == '\t':
			p.i++
		case p.s[p.i] == '\\' && p.at(1) == '\n':
			p.i += 2
		default:
			return
		}
	}
}

// comment skips a comment up to its newline, which it leaves.
func (p *shellParser) comment() {
	p.opaque("a comment")
	if n := strings.IndexByte(p.s[p.i:], '\n'); n >= 0 {
		p.i += n
	} else {
		p.i = len(p.s)
	}
}

// list reads commands and their operators up to the end (closer 0) or up
// to and past the closing ) (closer ')').
func (p *shellParser) list(closer byte) error {
	needCmd := false // after && || | |&
	for {
		p.blanks()
		if p.eof() {
			if closer != 0 {
				return errors.New("a ( is not closed")
			}
			if needCmd {
				return errors.New("the command ends after &&, || or |")
			}
			return nil
		}
		switch c := p.s[p.i]; c {
		case '\n':
			p.i++
			continue
		case '#':
			p.comment()
			continue
		case ')':
			if closer != ')' {
				return fmt.Errorf("a ) at byte %d closes nothing", p.i)
			}
			if needCmd {
				return fmt.Errorf("a ) at byte %d follows &&, || or |", p.i)
			}
			p.i++
			return nil
		case ';', '&', '|':
			return fmt.Errorf("%q at byte %d has no command before it", c, p.i)
		}
		if err := p.command(); err != nil {
			return err
		}
		needCmd = false
		p.blanks()
		if p.eof() {
			continue
		}
		switch p.s[p.i] {
		case ';':
			if p.at(1) == ';' || p.at(1) == '&' {
				return fmt.Errorf("a case terminator at byte %d", p.i)
			}
			p.i++
		case '&':
			if p.at(1) == '&' {
				p.i++
				needCmd = true
			}
			p.i++
		case '|':
			if p.at(1) == '|' || p.at(1) == '&' {
				p.i++
			}
			p.i++
			needCmd = true
		case '\n', '#', ')':
		default:
			return fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
		}
	}
}

// nested reads a list up to its closing ), one level deeper.
func (p *shellParser) nested() error {
	if p.depth++; p.depth > maxShellDepth {
		return fmt.Errorf("nested more than %d deep", maxShellDepth)
	}
	err := p.list(')')
	p.depth--
	return err
}

// command reads one simple command, or a subshell and its redirections.
func (p *shellParser) command() error {
	if p.s[p.i] == '(' {
		p.opaque("a subshell")
		p.i++
		if err := p.nested(); err != nil {
			return err
		}
		return p.words(nil)
	}
	var part shellPart
	if err := p.words(&part); err != nil {
		return err
	}
	if len(part.words) == 0 {
		p.opaque("a command of redirections only")
		return nil
	}
	switch w := part.words[0]; {
	case shellKeywords[w]:
		p.opaque("the shell keyword " + w)
	case isAssignment(w):
		p.opaque("an assignment before the command")
	case !plainWord(w):
		p.opaque("a command word that is not plain")
	}
	p.out.parts = append(p.out.parts, part)
	return nil
}

// words reads the words and redirections of a simple command into part
// (nil: none may come, after a subshell) up to its end: an operator, a
// newline, a comment, a ) or the end.
func (p *shellParser) words(part *shellPart) error {
	for {
		p.blanks()
		if p.eof() {
			return nil
		}
		c := p.s[p.i]
		switch {
		case c == '\n' || c == ';' || c == '|' || c == ')' || (c == '&' && p.at(1) != '>'):
			return nil
		case c == '#':
			p.comment()
			return nil
		case c == '(':
			return fmt.Errorf("a ( at byte %d inside a command", p.i)
		case (c == '<' || c == '>') && p.at(1) == '(':
			// a process substitution: a word
		case c == '<' || c == '>' || c == '&' || isDigit(c) && p.fdRedirect():
			if err := p.redirect(); err != nil {
				return err
			}
			continue
		}
		start := p.i
		w, err := p.word()
		if err != nil {
			return err
		}
		if part == nil {
			return fmt.Errorf("a word after a subshell at byte %d", start)
		}
		part.words = append(part.words, w)
	}
}

// fdRedirect reports whether the digits at p.i are a redirection's file
// descriptor (2>, 0<).
func (p *shellParser) fdRedirect() bool {
	j := p.i
	for j < len(p.s) && isDigit(p.s[j]) {
		j++
	}
	return j < len(p.s) && (p.s[j] == '<' || p.s[j] == '>')
}

// redirect reads a redirection: its file descriptor, operator and target.
// It is no word of the part; one that is not to /dev/null nor a
// duplication makes the command opaque.
func (p *shellParser) redirect() error {
	at := p.i
	for isDigit(p.at(0)) {
		p.i++
	}
	var op string
	for _, o := range []string{"&>>", "&>", "<<<", "<<-", "<<", "<&", "<>", "<", ">>", ">&", ">|", ">"} {
		if strings.HasPrefix(p.s[p.i:], o) {
			op = o
			break
		}
	}
	if op == "" {
		return fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
	}
	p.i += len(op)
	p.blanks()
	target, err := p.word()
	if err != nil {
		return err
	}
	if target == "" {
		return fmt.Errorf("the redirection at byte %d has no target", at)
	}
	switch {
	case op == "<<" || op == "<<-":
		p.opaque("a heredoc")
	case op == "<<<":
		p.opaque("a here-string")
	case target == "/dev/null":
	case (op == "<&" || op == ">&") && isFD(target):
	default:
		p.opaque("a redirection to a file")
	}
	return nil
}

// word reads one word up to a blank or an operator: "" if there is none.
// Its text is as written, line continuations dropped.
func (p *shellParser) word() (string, error) {
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		switch c {
		case ' ', '\t', '\n', ';', '&', '|', ')':
			return b.String(), nil
		case '(':
			return "", fmt.Errorf("a ( at byte %d inside a word", p.i)
		case '<', '>':
			if p.at(1) != '(' {
				return b.String(), nil
			}
			p.opaque("a process substitution")
			start := p.i
			p.i += 2
			if err := p.nested(); err != nil {
				return "", err
			}
			b.WriteString(p.s[start:p.i])
		case '\\':
			switch {
			case p.at(1) == '\n':
			case p.i+1 >= len(p.s):
				return "", errors.New("a backslash at the end")
			default:
				b.WriteString(p.s[p.i : p.i+2])
			}
			p.i += 2
		case '\'':
			n := strings.IndexByte(p.s[p.i+1:], '\'')
			if n < 0 {
				return "", fmt.Errorf("the single quote at byte %d is not closed", p.i)
			}
			b.WriteString(p.s[p.i : p.i+n+2])
			p.i += n + 2
		case '"':
			if err := p.dquote(&b); err != nil {
				return "", err
			}
		case '`':
			if err := p.backticks(&b); err != nil {
				return "", err
			}
		case '$':
			if err := p.dollar(&b, false); err != nil {
				return "", err
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return b.String(), nil
}

// dquote reads a double-quoted string from its opening quote.
func (p *shellParser) dquote(b *strings.Builder) error {
	open := p.i
	b.WriteByte('"')
	p.i++
	for !p.eof() {
		switch c := p.s[p.i]; c {
		case '"':
			b.WriteByte('"')
			p.i++
			return nil
		case '\\':
			switch {
			case p.at(1) == '\n':
			case p.i+1 >= len(p.s):
				return errors.New("a backslash at the end")
			default:
				b.WriteString(p.s[p.i : p.i+2])
			}
			p.i += 2
		case '`':
			if err := p.backticks(b); err != nil {
				return err
			}
		case '$':
			if err := p.dollar(b, true); err != nil {
				return err
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return fmt.Errorf("the double quote at byte %d is not closed", open)
}

// dollar reads what starts with a $: a substitution, ${NAME}, $'...',
// $"..." or a plain $ (a name after it is read as ordinary characters).
func (p *shellParser) dollar(b *strings.Builder, quoted bool) error {
	start := p.i
	switch p.at(1) {
	case '(':
		p.opaque("a command substitution")
		p.i += 2
		if err := p.nested(); err != nil {
			return err
		}
		b.WriteString(p.s[start:p.i])
	case '{':
		n := strings.IndexByte(p.s[p.i:], '}')
		if n < 0 || !simpleParam(p.s[p.i+2:p.i+n]) {
			return fmt.Errorf("the parameter expansion at byte %d is more than ${NAME}", start)
		}
		b.WriteString(p.s[p.i : p.i+n+1])
		p.i += n + 1
	case '[':
		return fmt.Errorf("an arithmetic expansion $[ at byte %d", start)
	case '\'':
		if quoted {
			b.WriteByte('$')
			p.i++
			return nil
		}
		for j := p.i + 2; j < len(p.s); j++ {
			switch p.s[j] {
			case '\\':
				j++
			case '\'':
				b.WriteString(p.s[p.i : j+1])
				p.i = j + 1
				return nil
			}
		}
		return fmt.Errorf("the $' at byte %d is not closed", start)
	case '"':
		if quoted {
			b.WriteByte('$')
			p.i++
			return nil
		}
		b.WriteByte('$')
		p.i++
		return p.dquote(b)
	default:
		b.WriteByte('$')
		p.i++
	}
	return nil
}

// backticks reads an old-style command substitution from its opening
// backtick, and splits what it runs (for deny rules).
func (p *shellParser) backticks(b *strings.Builder) error {
	p.opaque("backticks")
	var inner strings.Builder
	for j := p.i + 1; j < len(p.s); j++ {
		switch c := p.s[j]; c {
		case '\\':
			if j+1 >= len(p.s) {
				return errors.New("a backslash at the end")
			}
			// Inside backticks \\, \` and \$ lose their backslash.
			if n := p.s[j+1]; n != '\\' && n != '`' && n != '$' {
				inner.WriteByte('\\')
			}
			inner.WriteByte(p.s[j+1])
			j++
		case '`':
			b.WriteString(p.s[p.i : j+1])
			p.i = j + 1
			if p.depth+1 > maxShellDepth {
				return fmt.Errorf("nested more than %d deep", maxShellDepth)
			}
			sub := &shellParser{s: inner.String(), depth: p.depth + 1, out: p.out}
			return sub.list(0)
		default:
			inner.WriteByte(c)
		}
	}
	return fmt.Errorf("the backtick at byte %d is not closed", p.i)
}

// simpleParam reports whether the inside of ${...} is a name, a
// positional parameter, a special parameter or a length of one of them.
func simpleParam(s string) bool {
	if len(s) == 1 && strings.IndexByte("@*#?$!-", s[0]) >= 0 {
		return true
	}
	if s = strings.TrimPrefix(s, "#"); len(s) == 1 && strings.IndexByte("@*#?$!-", s[0]) >= 0 {
		return true
	}
	if s == "" {
		return false
	}
	if isDigit(s[0]) {
		return strings.Trim(s, "0123456789") == ""
	}
	return isName(s)
}

func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && isDigit(c)) {
			return false
		}
	}
	return s != ""
}

// isAssignment reports whether w is NAME=... or NAME+=... (NAME[...]= too).
func isAssignment(w string) bool {
	eq := strings.IndexByte(w, '=')
	if eq <= 0 {
		return false
	}
	name := strings.TrimSuffix(w[:eq], "+")
	if k := strings.IndexByte(name, '['); k > 0 && strings.HasSuffix(name, "]") {
		name = name[:k]
	}
	return isName(name)
}

// plainWord reports whether a command word is only letters, digits and
// _ . / + - : @ , (what the shell runs as it is written).
func plainWord(w string) bool {
	for i := 0; i < len(w); i++ {
		c := w[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || strings.IndexByte("_./+-:@,", c) >= 0) {
			return false
		}
	}
	return w != ""
}

// isFD reports whether a duplication's target is a descriptor (2, 2-) or
// - (close).
func isFD(w string) bool {
	w = strings.TrimSuffix(w, "-")
	return w == "" || strings.Trim(w, "0123456789") == ""
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
