package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// eventsPage is the reference page whose lists name every event kind.
const eventsPage = "../../docs/events.md"

// documentedKinds reads the kind lists of the events page: under the
// heading "## Kinds written to the log" and under "## Kinds sent to
// subscribers only", items "- `noun.*`: `verb`, `verb`, ..." (an item may
// go on over lines indented below it).
func documentedKinds(t *testing.T) (logged, ephemeral map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(eventsPage)
	if err != nil {
		t.Fatal(err)
	}
	logged, ephemeral = map[string]bool{}, map[string]bool{}
	var into map[string]bool
	item := regexp.MustCompile("^- `([a-z_]+)\\.\\*`: (.*)$")
	verb := regexp.MustCompile("`([a-z_]+)`")
	noun, text := "", ""
	flush := func() {
		if into != nil && noun != "" {
			for _, v := range verb.FindAllStringSubmatch(text, -1) {
				into[noun+"."+v[1]] = true
			}
		}
		noun, text = "", ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "#"):
			flush()
			switch strings.TrimSpace(l) {
			case "## Kinds written to the log":
				into = logged
			case "## Kinds sent to subscribers only":
				into = ephemeral
			default:
				into = nil
			}
		case item.MatchString(l):
			flush()
			m := item.FindStringSubmatch(l)
			noun, text = m[1], m[2]
		case noun != "" && strings.HasPrefix(l, "  "):
			text += " " + l
		default:
			flush()
		}
	}
	flush()
	return logged, ephemeral
}

// The events page lists every kind the daemon's packages register, each
// where it goes (the log, or subscribers only), and no kind that is not
// registered.
func TestEventKindsDocumented(t *testing.T) {
	t.Parallel()
	logged, ephemeral := documentedKinds(t)
	if len(logged) == 0 || len(ephemeral) == 0 {
		t.Fatalf("%s: no kind lists found (%d logged, %d sent to subscribers only)", eventsPage, len(logged), len(ephemeral))
	}
	registered := map[string]bool{}
	var missing []string
	for _, k := range eventlog.Kinds() {
		registered[k] = true
		_, eph := eventlog.Registered(k).(eventlog.Ephemeral)
		switch {
		case eph && !ephemeral[k]:
			missing = append(missing, k+" (sent to subscribers only)")
		case !eph && !logged[k]:
			missing = append(missing, k+" (written to the log)")
		}
	}
	var stale []string
	for _, m := range []map[string]bool{logged, ephemeral} {
		for k := range m {
			if !registered[k] {
				stale = append(stale, k)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 || len(stale) > 0 {
		t.Errorf("%s: kinds registered but not listed where they go: %v; listed but not registered: %v",
			eventsPage, missing, stale)
	}
}
