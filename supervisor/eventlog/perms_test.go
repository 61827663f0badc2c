package eventlog

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A log that already exists with a loose mode (issue 6: an events.ndjson
// left at 0666 stayed 0666) is made 0600 when the bus opens it, rotated
// files included, and keeps its lines.
func TestOpenMakesAnExistingLogPrivate(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "events.ndjson")
	writeLog(t, path, []Event{laneRecovered{Lane: "a"}}, nil)
	writeLog(t, path+".1", []Event{laneRecovered{Lane: "old"}}, nil)
	for name, mode := range map[string]os.FileMode{path: 0o666, path + ".1": 0o644} {
		if err := os.Chmod(name, mode); err != nil { // not left to the umask
			t.Fatal(err)
		}
	}
	b := openTest(t, Options{Path: path})
	b.Emit(laneRecovered{Lane: "b"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + ".1"} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", filepath.Base(name), st.Mode().Perm())
		}
	}
	if lines, _ := readAll(t, path, Query{}); len(lines) != 3 || lines[2].Fields["lane"] != "b" {
		t.Fatalf("log after reopening: %d lines, want old, a, b", len(lines))
	}
}

// The file the writer reopens when an outside tool replaced the log is
// made private too.
func TestReopenedLogIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.ndjson")
	b, err := open(Options{Path: path}, hooks{checkEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Emit(laneRecovered{Lane: "a"})
	waitForLine(t, path, "a")
	// An outside tool renames the log away and leaves a world-writable
	// empty file in its place.
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	b.Emit(laneRecovered{Lane: "b"})
	waitForLine(t, path, "b")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("reopened log: mode %#o, want 0600", st.Mode().Perm())
	}
}
