package layout

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The documentation's shape: README.md (what it is, the two commands, a
// tour, guides) and ARCHITECTURE.md (the map) stay short enough to read,
// the reference is in docs/, one page a topic.
const (
	maxGuideLines = 400 // README.md, ARCHITECTURE.md
	maxLineRunes  = 120 // every line of every page
)

// historyNote is a note of when something changed ("before issue 25",
// "(issue 37)"): the pages say what is, the history is git's.
var historyNote = regexp.MustCompile(`(?i)\bissues?\s+#?\d+|\(#\d+\)`)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// docPages are README.md, ARCHITECTURE.md and every page under docs/,
// relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages := []string{"README.md", "ARCHITECTURE.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing docs/: %v", err)
	}
	return pages
}

// TestDocsShape: README.md and ARCHITECTURE.md within maxGuideLines lines;
// every line of them and of docs/ within maxLineRunes characters; no
// history notes; every relative link to a file that exists (and, with a
// #fragment, to a heading of it); every page of docs/ reachable by links
// from README.md.
func TestDocsShape(t *testing.T) {
	root := filepath.Join("..", "..")
	pages := docPages(t, root)
	var bad []string
	linked := map[string][]string{} // page -> pages it links
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, checkPage(root, page, string(b), linked)...)
	}
	// Reachable from README.md.
	seen := map[string]bool{"README.md": true}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range linked[p] {
			if !seen[q] {
				seen[q] = true
				queue = append(queue, q)
			}
		}
	}
	for _, p := range pages {
		if !seen[p] {
			bad = append(bad, p+": no link leads to it from README.md")
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%d problem(s) in the documentation:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// checkPage returns page's problems, and records in linked the .md pages
// it links to.
func checkPage(root, page, text string, linked map[string][]string) []string {
	var bad []string
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if (page == "README.md" || page == "ARCHITECTURE.md") && len(lines) > maxGuideLines {
		bad = append(bad, fmt.Sprintf("%s: %d lines, want at most %d (reference goes in docs/)", page, len(lines), maxGuideLines))
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > maxLineRunes {
			bad = append(bad, fmt.Sprintf("%s:%d: %d characters, want at most %d", page, i+1, n, maxLineRunes))
		}
		if m := historyNote.FindString(l); m != "" {
			bad = append(bad, fmt.Sprintf("%s:%d: a history note (%q): say what is, not when it changed", page, i+1, m))
		}
	}
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		dest := page
		if file != "" {
			dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
		}
		b, err := os.ReadFile(filepath.Join(root, dest))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: link %q: %v", page, target, err))
			continue
		}
		if strings.HasSuffix(dest, ".md") {
			linked[page] = append(linked[page], dest)
			if frag != "" && !anchors(string(b))[frag] {
				bad = append(bad, fmt.Sprintf("%s: link %q: %s has no heading #%s", page, target, dest, frag))
			}
		}
	}
	return bad
}

// anchors are the fragments GitHub gives the headings of a Markdown page:
// lower case, spaces as "-", punctuation but "-" and "_" dropped.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		if h == "" || !strings.HasPrefix(strings.TrimLeft(l, "#"), " ") {
			continue
		}
		var s strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				s.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				s.WriteRune(r)
			}
		}
		out[s.String()] = true
	}
	return out
}

// The checks find what they are for.
func TestCheckPageFindsProblems(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "there.md"), []byte("# A heading, here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", maxLineRunes+1)
	text := "ok line\n" + long + "\n(Before issue 25 it was so.)\n[gone](missing.md) [ok](there.md#a-heading-here) " +
		"[bad anchor](there.md#nope) [web](https://example.com/x)\n"
	linked := map[string][]string{}
	bad := checkPage(root, "page.md", text, linked)
	want := []string{"121 characters", "history note", `link "missing.md"`, "has no heading #nope"}
	if len(bad) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(bad), len(want), strings.Join(bad, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(bad[i], w) {
			t.Errorf("problem %d is %q, want it to say %q", i, bad[i], w)
		}
	}
	if len(linked["page.md"]) != 2 {
		t.Errorf("linked: %v", linked)
	}
	if bad := checkPage(root, "README.md", strings.Repeat("x\n", maxGuideLines+1), linked); len(bad) != 1 {
		t.Errorf("a README of %d lines: %v", maxGuideLines+1, bad)
	}
	if bad := checkPage(root, "README.md", strings.Repeat("x\n", maxGuideLines), linked); len(bad) != 0 {
		t.Errorf("a README of %d lines: %v", maxGuideLines, bad)
	}
}
