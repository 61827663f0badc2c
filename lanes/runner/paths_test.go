package runner

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolvePath(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(base+"/d/e", 0o755))
	must(os.WriteFile(base+"/d/file", nil, 0o644))
	must(os.Symlink("d/e", base+"/rel"))
	must(os.Symlink(base+"/d", base+"/abs"))
	must(os.Symlink("loop2", base+"/loop1"))
	must(os.Symlink("loop1", base+"/loop2"))
	must(os.Symlink("missing/x", base+"/dangling"))

	for in, want := range map[string]string{
		base + "/d/e":             base + "/d/e",
		base + "/rel":             base + "/d/e",
		base + "/rel/..":          base + "/d", // kernel order: .. of the target
		base + "/abs/e/f/g":       base + "/d/e/f/g",
		base + "/none/a/../b":     base + "/none/b",
		base + "/d/file/x":        base + "/d/file/x",
		base + "/dangling/y":      base + "/missing/x/y",
		base + "//d/./e/":         base + "/d/e",
		"/":                       "/",
		base + "/../" + "..":      filepath.Dir(filepath.Dir(base)),
		base + "/abs/../abs/../d": base + "/d",
	} {
		got, err := resolvePath(in)
		if err != nil || got != want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolvePath(base + "/loop1/x"); err == nil {
		t.Error("symlink loop resolved")
	}
	if _, err := resolvePath("relative"); err == nil {
		t.Error("relative path resolved")
	}
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		root, p string
		want    bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b", "/a/b/c", true},
		{"/a/b", "/a/bc", false},
		{"/a/b", "/a", false},
		{"/", "/x", true},
	} {
		if got := under(tc.root, tc.p); got != tc.want {
			t.Errorf("under(%q, %q) = %v", tc.root, tc.p, got)
		}
	}
}
