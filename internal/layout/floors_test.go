package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path of the orchestrd module.
const module = "github.com/orchestrd/orchestrd"

// protoactor is the actor library; only actors/ imports it.
const protoactor = "github.com/asynkron/protoactor-go"

// floors places every top-level folder of the module on a floor, lowest
// first. A package imports packages of lower floors, and of its own floor
// only within its own top-level folder (lanes -> lanes/runner, not
// lanes -> clanker). A new top-level folder must be added here.
var floors = map[string]int{
	"api":        0,
	"wire":       0,
	"actors":     0,
	"supervisor": 1,
	"state":      1,
	"platform":   2,
	"spool":      2,
	"lanes":      3,
	"fleet":      3,
	"approvals":  3,
	"executors":  3,
	"clanker":    3,
	"loops":      3,
	"chat":       3,
	"loopsy":     3,
	"daemon":     4,
	"cmd":        5,
	"examples":   5,
}

// floorNames says what each floor holds, for the failure messages.
var floorNames = []string{
	"bytes, shared types and the actor facade: api, wire, actors",
	"the supervision (restart policy, the root's list of services, the event log) and the state store: supervisor, state",
	"the platform under the domains (processes, sandbox, sockets, safe files, secrets; clanker's spool files): platform, spool",
	"the domains: lanes, fleet, approvals, executors, clanker, loops, chat, loopsy",
	"the daemon and its front-ends: daemon",
	"the binaries: cmd, examples",
}

// internalDir is test and benchmark support: it may import anything below
// cmd/, and only cmd/ and tests import it.
const internalDir = "internal"

// sameFloor are the imports allowed between two folders of one floor.
var sameFloor = map[[2]string]string{
	{"api", "wire"}:       "api's shared types use wire's (ARCHITECTURE: api imports nothing of ours but wire)",
	{"spool", "platform"}: "the spool's files are reached beneath a repo's .clanker (platform/beneath)",
}

// knownViolations are imports that break the floors today and that a
// branch in flight removes, "importer -> imported" (package paths without
// the module prefix). Each is skipped, named in the test's log; delete
// the entry once the branch has landed.
var knownViolations = map[string]string{}

// pkg is what `go list -json` says of one package of the module.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// The module's packages respect the floors; api/ and wire/ depend on no
// actor code.
func TestFloors(t *testing.T) {
	pkgs := goList(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages of %s", len(pkgs), module)
	}
	var bad []string
	for _, v := range check(pkgs) {
		if why, ok := knownViolations[v.edge]; ok {
			t.Logf("known, skipped (%s): %s", why, v.msg)
			continue
		}
		bad = append(bad, v.msg)
	}
	if len(bad) > 0 {
		t.Fatalf("%d import(s) break the floors (ARCHITECTURE.md, \"Where things live\"):\n%s",
			len(bad), strings.Join(bad, "\n"))
	}
	for edge := range knownViolations {
		t.Logf("known violation %q is no longer seen: delete it from knownViolations", edge)
	}
}

// frontEnds are the front-ends that reach the domains only through the
// method table (ARCHITECTURE: one door): they import no domain package and
// not the state store.
var frontEnds = []string{"daemon/httpapi"}

// Every front-end in frontEnds reaches the domains one way, the method
// table: none imports a domain (a folder on the domains' floor) or state/.
func TestFrontEndsOneDoor(t *testing.T) {
	var bad []string
	for _, p := range goList(t) {
		from, ok := ours(p.ImportPath)
		if !ok {
			continue
		}
		bad = append(bad, checkFrontEnd(from, p.Imports)...)
	}
	if len(bad) > 0 {
		t.Fatalf("%d import(s) of a front-end go around the method table:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// checkFrontEnd says which of imports (of package from, both inside the
// module) go around the method table, when from is a front-end (or a
// package under one).
func checkFrontEnd(from string, imports []string) []string {
	fe := ""
	for _, f := range frontEnds {
		if from == f || strings.HasPrefix(from, f+"/") {
			fe = f
		}
	}
	if fe == "" {
		return nil
	}
	var bad []string
	for _, imp := range imports {
		to, ok := ours(imp)
		if !ok {
			continue
		}
		top := topDir(to)
		if floors[top] == floors["lanes"] || top == "state" {
			bad = append(bad, fmt.Sprintf("%s imports %s: the front-end %s reaches the domains and the state store through the method table only",
				from, to, fe))
		}
	}
	return bad
}

// The front-end check fails on a domain or state/ and passes the rest.
func TestCheckFrontEnd(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	for _, c := range []struct {
		from    string
		imports []string
		want    int
	}{
		{"daemon/httpapi", []string{m("api"), m("wire"), m("platform/beneath"), m("supervisor/eventlog"), "net/http"}, 0},
		{"daemon/httpapi", []string{m("lanes")}, 1},
		{"daemon/httpapi", []string{m("state"), m("loopsy"), m("api")}, 2},
		{"daemon/httpapi/client", []string{m("lanes/runner")}, 1},
		{"daemon", []string{m("lanes"), m("state")}, 0}, // the daemon wires the domains
	} {
		if got := checkFrontEnd(c.from, c.imports); len(got) != c.want {
			t.Errorf("%s importing %v: %v, want %d violation(s)", c.from, c.imports, got, c.want)
		}
	}
}

// goList lists the module's packages with their imports and dependencies.
func goList(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// violation is one import that breaks the floors.
type violation struct {
	edge string // "importer -> imported", without the module prefix
	msg  string
}

// check returns every import of pkgs that breaks the floors.
func check(pkgs []pkg) []violation {
	var out []violation
	add := func(from, to, format string, args ...any) {
		out = append(out, violation{edge: from + " -> " + to, msg: fmt.Sprintf(format, args...)})
	}
	for _, p := range pkgs {
		from, ok := ours(p.ImportPath)
		if !ok {
			continue
		}
		top := topDir(from)
		_, placed := floors[top]
		if !placed && top != internalDir {
			add(from, "", "%s is in no floor: add its folder %s/ to floors in internal/layout", from, top)
			continue
		}
		for _, imports := range []struct {
			list []string
			test bool
		}{{p.Imports, false}, {p.TestImports, true}, {p.XTestImports, true}} {
			for _, imp := range imports.list {
				if isProtoactor(imp) && top != "actors" {
					add(from, imp, "%s imports %s: only actors/ imports protoactor", from, imp)
				}
				if to, ok := ours(imp); ok {
					if msg := checkImport(from, to, imports.test); msg != "" {
						add(from, to, "%s", msg)
					}
				}
			}
		}
		// What clients import stays free of actor code: the shared types,
		// the bytes, and the control socket's client.
		if top == "api" || top == "wire" || from == "daemon/control/client" {
			var actor []string
			for _, dep := range p.Deps {
				if isProtoactor(dep) {
					actor = append(actor, dep)
				}
			}
			if len(actor) > 0 {
				add(from, protoactor, "%s depends on protoactor (%s, %d package(s) in all): api/, wire/ and the control client are free of actor code",
					from, actor[0], len(actor))
			}
		}
	}
	return out
}

// checkImport says why from may not import to (both inside the module,
// without its prefix), or "" when it may. test is for the imports of
// from's tests.
func checkImport(from, to string, test bool) string {
	ft, tt := topDir(from), topDir(to)
	kind := "imports"
	if test {
		kind = "imports in its tests"
	}
	switch {
	case ft == tt:
		return ""
	case tt == internalDir:
		if ft == "cmd" || test {
			return ""
		}
		return fmt.Sprintf("%s %s %s: internal/ is test and benchmark support, imported only by cmd/ and tests", from, kind, to)
	}
	tf, placed := floors[tt]
	if !placed {
		return "" // reported as a package in no floor
	}
	if ft == internalDir {
		if tf >= floors["cmd"] {
			return fmt.Sprintf("%s %s %s: internal/ imports only packages below cmd/ (floor %d: %s)", from, kind, to, tf, floorNames[tf])
		}
		return ""
	}
	ff := floors[ft]
	switch {
	case tf > ff:
		return fmt.Sprintf("%s %s %s: floor %d (%s) must not import floor %d (%s)", from, kind, to, ff, floorNames[ff], tf, floorNames[tf])
	case tf == ff && sameFloor[[2]string{ft, tt}] == "":
		return fmt.Sprintf("%s %s %s: both on floor %d (%s), and a package imports its own floor only within its own folder (%s/)", from, kind, to, ff, floorNames[ff], ft)
	}
	return ""
}

// ours returns path without the module prefix when it is a package of the
// module.
func ours(path string) (string, bool) {
	if rest, ok := strings.CutPrefix(path, module+"/"); ok {
		return rest, true
	}
	return "", false
}

// topDir is the top-level folder of a package path inside the module.
func topDir(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

func isProtoactor(path string) bool {
	return path == protoactor || strings.HasPrefix(path, protoactor+"/")
}

// The checker itself: each rule fails on an import that breaks it, naming
// the import and the floors, and passes the imports the floors allow.
func TestCheckFindsViolations(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	for _, c := range []struct {
		name string
		p    pkg
		want string // in the one violation; "" for none
	}{
		{"lower floor", pkg{ImportPath: m("lanes"), Imports: []string{m("supervisor/eventlog"), m("actors"), m("api"), "fmt"}}, ""},
		{"own folder", pkg{ImportPath: m("lanes"), Imports: []string{m("lanes/runner")}}, ""},
		{"api uses wire", pkg{ImportPath: m("api"), Imports: []string{m("wire")}}, ""},
		{"spool uses platform", pkg{ImportPath: m("spool"), Imports: []string{m("platform/beneath"), m("wire")}}, ""},
		{"a domain uses spool", pkg{ImportPath: m("clanker"), Imports: []string{m("spool")}}, ""},
		{"actors uses protoactor", pkg{ImportPath: m("actors"), Imports: []string{protoactor + "/actor"}}, ""},
		{"cmd uses internal", pkg{ImportPath: m("cmd/orchbench"), Imports: []string{m("internal/daemonrun")}}, ""},
		{"a test uses internal", pkg{ImportPath: m("lanes"), TestImports: []string{m("internal/daemonrun")}}, ""},
		{"internal uses the daemon", pkg{ImportPath: m("internal/daemonrun"), Imports: []string{m("daemon/control"), m("api")}}, ""},

		{"higher floor", pkg{ImportPath: m("lanes"), Imports: []string{m("daemon/control")}},
			"lanes imports daemon/control: floor 3 (the domains: lanes, fleet, approvals, executors, clanker, loops, chat, loopsy) must not import floor 4 (the daemon and its front-ends: daemon)"},
		{"higher floor in a test", pkg{ImportPath: m("supervisor/eventlog"), XTestImports: []string{m("lanes")}},
			"supervisor/eventlog imports in its tests lanes: floor 1"},
		{"api on a domain", pkg{ImportPath: m("api"), Imports: []string{m("lanes")}},
			"api imports lanes: floor 0 (bytes, shared types and the actor facade: api, wire, actors) must not import floor 3"},
		{"same floor, other folder", pkg{ImportPath: m("lanes"), Imports: []string{m("clanker")}},
			"lanes imports clanker: both on floor 3 (the domains: lanes, fleet, approvals, executors, clanker, loops, chat, loopsy), and a package imports its own floor only within its own folder (lanes/)"},
		{"platform on spool", pkg{ImportPath: m("platform/beneath"), Imports: []string{m("spool")}}, "platform/beneath imports spool: both on floor 2"},
		{"spool on a domain", pkg{ImportPath: m("spool"), Imports: []string{m("clanker")}}, "spool imports clanker: floor 2"},
		{"wire on api", pkg{ImportPath: m("wire"), Imports: []string{m("api")}}, "wire imports api: both on floor 0"},
		{"wire on protoactor", pkg{ImportPath: m("wire"), Deps: []string{"fmt", protoactor + "/actor"}},
			"wire depends on protoactor (" + protoactor + "/actor, 1 package(s) in all): api/, wire/ and the control client are free of actor code"},
		{"control client on protoactor", pkg{ImportPath: m("daemon/control/client"), Deps: []string{protoactor + "/actor"}},
			"daemon/control/client depends on protoactor (" + protoactor + "/actor, 1 package(s) in all): api/, wire/ and the control client are free of actor code"},
		{"protoactor outside actors", pkg{ImportPath: m("lanes"), Imports: []string{protoactor + "/actor"}},
			"lanes imports " + protoactor + "/actor: only actors/ imports protoactor"},
		{"internal in the daemon", pkg{ImportPath: m("daemon"), Imports: []string{m("internal/daemonrun")}},
			"daemon imports internal/daemonrun: internal/ is test and benchmark support, imported only by cmd/ and tests"},
		{"internal on cmd", pkg{ImportPath: m("internal/daemonrun"), Imports: []string{m("cmd/orchestrd")}},
			"internal/daemonrun imports cmd/orchestrd: internal/ imports only packages below cmd/ (floor 5: the binaries: cmd, examples)"},
		{"a folder in no floor", pkg{ImportPath: m("telemetry")}, "telemetry is in no floor: add its folder telemetry/ to floors"},
	} {
		vs := check([]pkg{c.p})
		switch {
		case c.want == "" && len(vs) != 0:
			t.Errorf("%s: violations %v, want none", c.name, vs)
		case c.want != "" && (len(vs) != 1 || !strings.Contains(vs[0].msg, c.want)):
			t.Errorf("%s: violations %v, want one saying %q", c.name, vs, c.want)
		}
	}
	if got := check([]pkg{{ImportPath: m("lanes"), Imports: []string{m("daemon/control")}}}); !slices.ContainsFunc(got, func(v violation) bool {
		return v.edge == "lanes -> daemon/control"
	}) {
		t.Errorf("violation edges %v, want lanes -> daemon/control (the key of knownViolations)", got)
	}
}

// leanRunner are the runner process's packages: its entry and its code.
// Their dependencies stay lean (the runner starts for every spare and
// every restart): gopsutil is the daemon's only (platform/nodefigs).
var leanRunner = []string{"lanes/runner", "cmd/orchestrd/internal/runnerentry"}

// heavyForRunner are module paths the runner's packages must not depend on.
var heavyForRunner = []string{"github.com/shirou/gopsutil"}

// runnerHeavyDeps returns "pkg -> dep" for each dependency of the runner's
// packages in pkgs that heavyForRunner forbids.
func runnerHeavyDeps(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		if !slices.Contains(leanRunner, strings.TrimPrefix(p.ImportPath, module+"/")) {
			continue
		}
		for _, d := range p.Deps {
			for _, h := range heavyForRunner {
				if d == h || strings.HasPrefix(d, h+"/") {
					bad = append(bad, p.ImportPath+" -> "+d)
				}
			}
		}
	}
	return bad
}

func TestRunnerLean(t *testing.T) {
	pkgs := goList(t)
	seen := 0
	for _, p := range pkgs {
		if slices.Contains(leanRunner, strings.TrimPrefix(p.ImportPath, module+"/")) {
			seen++
		}
	}
	if seen != len(leanRunner) {
		t.Fatalf("found %d of the runner's packages %v", seen, leanRunner)
	}
	if bad := runnerHeavyDeps(pkgs); len(bad) > 0 {
		t.Fatalf("the runner's packages depend on what only the daemon may:\n%s", strings.Join(bad, "\n"))
	}
	// The check sees such a dependency.
	fake := []pkg{{ImportPath: module + "/lanes/runner", Deps: []string{"github.com/shirou/gopsutil/v4/mem"}}}
	if len(runnerHeavyDeps(fake)) != 1 {
		t.Fatal("runnerHeavyDeps misses gopsutil under lanes/runner")
	}
}
