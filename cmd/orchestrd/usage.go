package main

// Usage errors: one line saying what is wrong, a "did you mean" when
// something is close, and where the help is. Never the whole usage.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// helpHint is where a command's help is: "orchestrd jobs --help", or
// "orchestrd help" for orchestrd itself.
func helpHint(cmd string) string {
	if cmd == "" {
		return "orchestrd help"
	}
	return "orchestrd " + cmd + " --help"
}

// usageLine prints a usage error of cmd ("" for orchestrd itself) and
// returns exitUsage.
func usageLine(stderr io.Writer, cmd, msg string) int {
	name := "orchestrd"
	if cmd != "" {
		name += " " + cmd
	}
	fmt.Fprintf(stderr, "%s: %s (%s)\n", name, msg, helpHint(cmd))
	return exitUsage
}

// flagError says what was wrong with fs's flags: an unknown flag as
// "unknown flag --stat; did you mean --state?", anything else as the flag
// package says it.
func flagError(fs *flag.FlagSet, err error) string {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, undefined)
	if !ok {
		return msg
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	msg = "unknown flag --" + name
	if s := suggest(name, names); s != "" {
		msg += "; did you mean --" + s + "?"
	}
	return msg
}

// isFlagError reports whether err is a parse error (not --help).
func isFlagError(err error) bool { return err != nil && !errors.Is(err, flag.ErrHelp) }

// suggest is the one of names closest to s, if it is close enough to be
// what s meant (a typo or two, or the start of it); "" otherwise, or when
// two are as close.
func suggest(s string, names []string) string {
	best, bestD, ties := "", 3, 0
	for _, n := range names {
		d := editDistance(s, n)
		if len(s) >= 3 && strings.HasPrefix(n, s) && d > 1 {
			d = 1 // the start of a name counts as one typo
		}
		switch {
		case d < bestD:
			best, bestD, ties = n, d, 0
		case d == bestD:
			ties++
		}
	}
	// A long word may be two typos off; a short one only one.
	if best == "" || ties > 0 || bestD > 1 && len(s) < 5 {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of neighbours.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// commandNames are the names of the commands a person types, sorted.
func commandNames() []string {
	var names []string
	for _, c := range commands {
		if !c.hidden {
			names = append(names, c.name)
		}
	}
	sort.Strings(names)
	return names
}
