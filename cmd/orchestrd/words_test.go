package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// Counts are in words: one job is "1 job". status's lane slots are the ones
// run counts (its serving runners' slots, and how many hold a job); job
// says how a stopped job was stopped.
func TestCLIWords(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[lanes.work]\nrunners = 2\nslots = 2\nspares = 0\nnetwork = \"host\"\nkill_grace = \"30s\"\n")
	for range 2 {
		d.wait(d.submit(api.JobSpec{Lane: "work", Argv: []string{"true"}}))
	}
	_, errOut, code := runCLI(t, "--home", d.home, "jobs", "--limit", "1")
	if code != 0 || !regexp.MustCompile(`^orchestrd: 1 job shown, there are more: orchestrd jobs .*--limit 1 --cursor \S+\n$`).MatchString(errOut) {
		t.Fatalf("jobs --limit 1: exit %d, stderr %q", code, errOut)
	}

	// A job that ends at SIGTERM holds one of the lane's 2 x 2 slots.
	id := d.submit(api.JobSpec{Lane: "work", Command: "trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done"})
	d.waitRunning(id)
	out, errOut, code := runCLI(t, "--home", d.home, "status")
	if code != 0 || !regexp.MustCompile(`(?m)^LANE\s+NETWORK\s+SLOTS IN USE\s+QUEUED`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^work\s+host\s+1 of 4\s+0\s+1\s+no$`).MatchString(out) {
		t.Fatalf("status: exit %d, %q\n%s", code, errOut, out)
	}
	if _, errOut, code = runCLI(t, "--home", d.home, "cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d, %q", code, errOut)
	}
	if rec := d.wait(id); rec.StoppedBy != "sigterm" {
		t.Fatalf("the cancelled job: %+v", rec)
	}
	out, errOut, code = runCLI(t, "--home", d.home, "job", id)
	if code != 0 || !regexp.MustCompile(`(?m)^stopped by\s+SIGTERM \(it ended within its kill grace\)$`).MatchString(out) {
		t.Fatalf("job of a cancelled job: exit %d, %q\n%s", code, errOut, out)
	}
}

// readyLines are the daemon's ready lines text shows: each line indented
// "INF orchestrd ready ...", joined with the lines below it indented
// deeper (a ready line wrapped to fit the page), without "INF orchestrd
// ready ".
func readyLines(text string) []string {
	var found []string
	lines := strings.Split(text, "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		rest, ok := strings.CutPrefix(strings.TrimLeft(l, " "), "INF orchestrd ready ")
		if !ok || indent(l) == 0 {
			continue
		}
		for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" && indent(lines[i+1]) > indent(l) {
			i++
			rest += " " + strings.TrimSpace(lines[i])
		}
		found = append(found, rest)
	}
	return found
}

// The README's ready lines name the fields the daemon's have, the lanes
// page's unknown-lane message is the one run and lane token print, and
// README and docs/ point at nothing outside the repository (../shared/ is
// not in a clone).
func TestREADMEMatchesDaemon(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v %q", err, pages)
	}
	sub, _ := filepath.Glob("../../docs/*/*.md")
	for _, p := range append([]string{"../../README.md", "../../ARCHITECTURE.md"}, append(pages, sub...)...) {
		if b, err := os.ReadFile(p); err != nil || strings.Contains(string(b), "../shared") {
			t.Errorf("%s points at ../shared, which a clone does not have (or: %v)", p, err)
		}
	}
	// The ready lines: the first, of a daemon alone; the fleet
	// guide's, of a node of a fleet (cluster=, node=).
	ms := readyLines(readme)
	if len(ms) != 2 || strings.Contains(ms[0], "cluster=") || !strings.Contains(ms[1], "cluster=") {
		t.Fatalf("want two ready lines in README, a daemon's alone and then a fleet node's: %q", ms)
	}
	fields := func(line string) []string {
		var documented []string
		for _, f := range regexp.MustCompile(`(?:^| )([a-z]+)=`).FindAllStringSubmatch(line, -1) {
			documented = append(documented, f[1])
		}
		sort.Strings(documented)
		return documented
	}
	readyFields := func(d *testDaemon) []string {
		readyLine(t, d) // the socket answers before the log, a pipe, reaches the test
		var real []string
		for _, l := range strings.Split(d.stderr.String(), "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) != nil || line["message"] != "orchestrd ready" {
				continue
			}
			for k := range line {
				if k != "level" && k != "time" && k != "message" {
					real = append(real, k)
				}
			}
		}
		sort.Strings(real)
		return real
	}

	d := startDaemon(t, "[lanes.net]\nrunners = 1\nspares = 0\nnetwork = \"host\"\n[lanes.no-net]\nrunners = 1\nspares = 0\n")
	if documented, real := fields(ms[0]), readyFields(d); !slices.Equal(documented, real) {
		t.Errorf("README's ready line has %v, the daemon's %v", documented, real)
	}
	// A node of a fleet (of one), with README's fleet config.
	fd := startDaemonAt(t, fleetHome(t, "gpu-box", readmeFleetConfig(t)), "")
	if documented, real := fields(ms[1]), readyFields(fd); !slices.Equal(documented, real) {
		t.Errorf("README's ready line of a fleet node has %v, the daemon's %v", documented, real)
	}

	lanes, err := os.ReadFile("../../docs/lanes.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`(unknown lane \"NOPE\"; the daemon's lanes are) \\.\\.\\.`").FindStringSubmatch(string(lanes))
	if m == nil {
		t.Fatal("no unknown-lane message in docs/lanes.md")
	}
	_, errOut, code := runCLI(t, "--home", d.home, "run", "--lane", "NOPE", "--", "true")
	if code != 1 || errOut != "orchestrd: "+m[1]+" net, no-net\n" {
		t.Errorf("run --lane NOPE: exit %d, %q; docs/lanes.md says %q", code, errOut, m[1]+" ...")
	}
	_, errOut, code = runCLI(t, "--home", d.home, "lane", "token", "NOPE")
	if code != 1 || errOut != "orchestrd lane token: "+m[1]+" net, no-net\n" {
		t.Errorf("lane token NOPE: exit %d, %q; docs/lanes.md says %q", code, errOut, m[1]+" ...")
	}
}
