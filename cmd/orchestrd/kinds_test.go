package main

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// notEvents are the types with a Kind() string method that are not event
// kinds.
var notEvents = map[string]string{
	"actors.Context": "an actor's kind (lane, runner, job, ...), not an event",
}

// sourceKind is a Kind method found in the source: the type that has it
// and the kind it returns.
type sourceKind struct {
	pkg, typ, kind string
}

// Every type in the repository (outside test files) with a Kind() string
// method is an event kind registered with the event log by its own
// package, so the log and `orchestrd events` know it; this binary links
// every package that emits events. It replaces the list of kinds kept by
// hand, and the test that kept that list in step with kinds.go.
func TestEveryKindIsRegistered(t *testing.T) {
	t.Parallel()
	root, module := moduleRoot(t)
	var found []sourceKind
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := module
		if rel != "." {
			pkg += "/" + filepath.ToSlash(rel)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != "Kind" || !returnsOnlyString(fd.Type) {
				continue
			}
			typ := receiverName(fd.Recv.List[0].Type)
			short := pkg[strings.LastIndex(pkg, "/")+1:] + "." + typ
			if _, ok := notEvents[short]; ok {
				continue
			}
			kind, ok := literalReturn(fd.Body)
			if !ok {
				t.Errorf("%s: %s.Kind does not return a string literal: an event kind is a literal (or add %s to notEvents)",
					fset.Position(fd.Pos()), typ, short)
				continue
			}
			found = append(found, sourceKind{pkg: pkg, typ: typ, kind: kind})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the source: %v", err)
	}
	if len(found) == 0 {
		t.Fatalf("no Kind method found under %s", root)
	}
	inSource := map[string]bool{}
	for _, k := range found {
		inSource[k.kind] = true
		reg := eventlog.Registered(k.kind)
		if reg == nil {
			t.Errorf("%s.%s (%s) is not registered: call eventlog.Register(%s{}) from an init function in its package",
				k.pkg, k.typ, k.kind, k.typ)
			continue
		}
		if rt := reflect.TypeOf(reg); rt.PkgPath() != k.pkg || rt.Name() != k.typ {
			t.Errorf("%s is registered by %s.%s, but %s.%s has that kind too", k.kind, rt.PkgPath(), rt.Name(), k.pkg, k.typ)
		}
	}
	for _, kind := range eventlog.Kinds() {
		if !inSource[kind] {
			t.Errorf("%s is registered (by %T) but no Kind method in the source returns it", kind, eventlog.Registered(kind))
		}
	}
}

// moduleRoot is the directory of go.mod above the test's directory, and
// the module's path.
func moduleRoot(t *testing.T) (dir, module string) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(sc.Text(), "module "); ok {
					return dir, strings.TrimSpace(m)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// returnsOnlyString: the method takes nothing and returns one string.
func returnsOnlyString(ft *ast.FuncType) bool {
	if ft.Params.NumFields() != 0 || ft.Results.NumFields() != 1 {
		return false
	}
	id, ok := ft.Results.List[0].Type.(*ast.Ident)
	return ok && id.Name == "string"
}

// receiverName is the name of a method's receiver type, T or *T.
func receiverName(e ast.Expr) string {
	if st, ok := e.(*ast.StarExpr); ok {
		e = st.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

// literalReturn is the string a body made of one return of a string
// literal returns.
func literalReturn(body *ast.BlockStmt) (string, bool) {
	if body == nil || len(body.List) != 1 {
		return "", false
	}
	ret, ok := body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return "", false
	}
	lit, ok := ret.Results[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
