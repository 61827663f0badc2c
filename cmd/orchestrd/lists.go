package main

// What every list command shares: one JSON shape, one table, one line
// saying a list was cut, one way to write the command that shows more.

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/orchestrd/orchestrd/api"
)

// listCut says how a list was cut: truncated when there are more than it
// holds, nextCursor when a cursor continues it.
type listCut struct {
	truncated  bool
	nextCursor string
}

// printList prints a list as every --json list is printed: an object with
// the list under the things' name (never null), "next_cursor" when a cursor
// continues it and "truncated": true when it was cut:
//
//	{"jobs": [...], "next_cursor": "17", "truncated": true}
func printList(stdout, stderr io.Writer, things string, items any, cut listCut) int {
	if v := reflect.ValueOf(items); v.Kind() == reflect.Slice && v.IsNil() {
		items = []struct{}{}
	}
	obj := map[string]any{things: items}
	if cut.nextCursor != "" {
		obj["next_cursor"] = cut.nextCursor
	}
	if cut.truncated || cut.nextCursor != "" {
		obj["truncated"] = true
	}
	return printJSON(stdout, stderr, obj)
}

// printTable prints a list as a list command does: as printList does with
// asJSON; else the line none when there are no items, or the header and a
// row an item (row writes its tab-separated cells and the newline), in
// columns two spaces apart.
func printTable[T any](stdout, stderr io.Writer, asJSON bool, things string, items []T, cut listCut, none, header string, row func(w io.Writer, item T)) int {
	if asJSON {
		return printList(stdout, stderr, things, items, cut)
	}
	if len(items) == 0 {
		fmt.Fprintln(stdout, none)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, item := range items {
		row(tw, item)
	}
	tw.Flush()
	return exitOK
}

// moreHint says on stderr, in one line, that a list was cut after n
// things, and the command that shows more (none when next is "").
func moreHint(stderr io.Writer, n int, noun, next string) {
	if next == "" {
		fmt.Fprintf(stderr, "orchestrd: %s shown, there are more\n", api.Count(n, noun))
		return
	}
	fmt.Fprintf(stderr, "orchestrd: %s shown, there are more: %s\n", api.Count(n, noun), next)
}

// cmdLine is a command line for a person to copy: orchestrd, then the
// words, each quoted for a shell where it needs it.
func cmdLine(words ...string) string {
	parts := []string{"orchestrd"}
	for _, w := range words {
		parts = append(parts, shellQuote(w))
	}
	return strings.Join(parts, " ")
}

// opt is a flag and its value as words of a command line: none when the
// value is "".
func opt(flag, value string) []string {
	if value == "" {
		return nil
	}
	return []string{flag, value}
}

// optIf is a bool flag as words of a command line: none when it is false.
func optIf(flag string, set bool) []string {
	if !set {
		return nil
	}
	return []string{flag}
}
