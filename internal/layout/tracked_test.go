package layout

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may track: built
// binaries, databases and captures have no place in git.
const maxTracked = 1 << 20

// TestNoBuiltFilesTracked fails on a tracked executable binary (an ELF,
// Mach-O, PE or wasm file, whatever its mode, or a file with the
// executable bit that is not a "#!" script) and on a tracked file over
// 1 MiB. It reads git's index, so it sees what a commit would hold; outside
// a git checkout (a source tarball) there is nothing to check.
func TestNoBuiltFilesTracked(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		if _, serr := os.Stat(filepath.Join("..", "..", ".git")); serr != nil {
			t.Skipf("not a git checkout: %v", err)
		}
		t.Fatalf("git rev-parse in a git checkout: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	cmd := exec.Command("git", "ls-files", "-s", "-z")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var bad []string
	n := 0
	for _, rec := range bytes.Split(out, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := strings.Cut(string(rec), "\t")
		if !ok {
			t.Fatalf("git ls-files: unexpected record %q", rec)
		}
		n++
		mode := strings.Fields(meta)[0]
		if mode == "120000" || mode == "160000" { // a symlink or a submodule: no content here
			continue
		}
		if why := builtFile(filepath.Join(dir, path), mode == "100755"); why != "" {
			bad = append(bad, path+": "+why)
		}
	}
	if n == 0 {
		t.Fatal("git ls-files listed nothing")
	}
	if len(bad) > 0 {
		t.Fatalf("%d tracked file(s) do not belong in git (remove them with git rm --cached, ignore them in .gitignore):\n  %s",
			len(bad), strings.Join(bad, "\n  "))
	}
}

// builtFile says why the file at path must not be tracked, or "".
func builtFile(path string, executable bool) string {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return "" // deleted in the work tree; the index is what commits, but there is nothing to read
		}
		return fmt.Sprintf("cannot read it: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("cannot stat it: %v", err)
	}
	if st.Size() > maxTracked {
		return fmt.Sprintf("%d bytes, over the 1 MiB limit", st.Size())
	}
	head := make([]byte, 4)
	k, _ := io.ReadFull(bufio.NewReader(f), head)
	if kind := binaryKind(head[:k]); kind != "" {
		return "a built " + kind + " binary"
	}
	if executable && !bytes.HasPrefix(head[:k], []byte("#!")) {
		return "executable but not a #! script"
	}
	return ""
}

// binaryKind names the executable format that head starts with, or "".
func binaryKind(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF"
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "Mach-O"
	case bytes.HasPrefix(head, []byte("MZ")):
		return "PE"
	case bytes.HasPrefix(head, []byte("\x00asm")):
		return "wasm"
	}
	return ""
}

// The check itself catches what it is for: a built binary, a big file,
// an executable that is not a script; and passes a script and a source
// file.
func TestBuiltFileCheck(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable() // this test binary: a real ELF
	if err != nil {
		t.Fatal(err)
	}
	elf, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	files := []struct {
		name       string
		data       []byte
		executable bool
		want       string
	}{
		{"built", elf[:4096], false, "a built ELF binary"},
		{"built-exec", elf[:4096], true, "a built ELF binary"},
		{"big.json", bytes.Repeat([]byte("{}\n"), maxTracked/3+1), false, "over the 1 MiB limit"},
		{"tool", []byte("plain text"), true, "executable but not a #! script"},
		{"run", []byte("#!/bin/sh\necho hi\n"), true, ""},
		{"main.go", []byte("package main\n"), false, ""},
		{"exact", bytes.Repeat([]byte("a"), maxTracked), false, ""},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		got := builtFile(p, f.executable)
		if (f.want == "") != (got == "") || !strings.Contains(got, f.want) {
			t.Errorf("%s: %q, want %q", f.name, got, f.want)
		}
	}
}
