package state

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func userVersion(t *testing.T, path string) int {
	t.Helper()
	var v int
	if err := rawDB(t, path).QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	for i, m := range migrations {
		if m.version != i+1 || m.name == "" || m.sql == "" {
			t.Fatalf("migration %d: %+v", i, m)
		}
	}
}

// An older daemon refuses a file a newer one wrote, saying which file and
// both versions, and touches nothing.
func TestNewerSchemaIsRefused(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	newer := SchemaVersion() + 1
	if _, err := rawDB(t, path).Exec(fmt.Sprintf("PRAGMA user_version = %d", newer)); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, testOpts)
	var se *SchemaError
	if !errors.As(err, &se) || se.FileVersion != newer || se.Supported != SchemaVersion() || se.Path != path {
		t.Fatalf("Open of a newer file: %v", err)
	}
	want := fmt.Sprintf("state store %s has schema version %d, newer than this orchestrd supports (%d)", path, newer, SchemaVersion())
	if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q, want one line starting %q", err, want)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("the refused file was changed")
	}
}

// A newer daemon upgrades a file an older one wrote, keeping its data: here
// the build's schema is the older one and a test migration the newer.
func TestMigrationUpgradesOlderFile(t *testing.T) {
	path := dbPath(t)
	s := openT(t, path, testOpts)
	spec := api.JobSpec{Command: "true"}
	if err := s.Jobs().Submit(ctx, submitted("j-old", "net", spec, time.Now()), spec); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	v := SchemaVersion()
	newer := append(migrations[:len(migrations):len(migrations)], migration{version: v + 1, name: "test: job notes",
		sql: `ALTER TABLE jobs ADD COLUMN note TEXT;
			UPDATE jobs SET note = 'was ' || state;
			CREATE TABLE test_notes (id TEXT PRIMARY KEY, rule TEXT NOT NULL);`})
	s2, err := open(path, testOpts, newer)
	if err != nil {
		t.Fatal(err)
	}
	if rec, ok, err := s2.Jobs().Get("j-old"); !ok || err != nil || rec.State != api.StateQueued {
		t.Fatalf("after the upgrade: %+v %v %v", rec, ok, err)
	}
	var note string
	if err := s2.Do(ctx, &sqlWrite{query: "SELECT note FROM jobs WHERE id = 'j-old'", out: &note}); err != nil || note != "was queued" {
		t.Fatalf("the migration's column: %q %v", note, err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := userVersion(t, path); got != v+1 {
		t.Fatalf("user_version %d after the upgrade, want %d", got, v+1)
	}
	// And this build, now the older one, refuses it.
	var se *SchemaError
	if _, err := Open(path, testOpts); !errors.As(err, &se) || se.FileVersion != v+1 {
		t.Fatalf("the older build opened the upgraded file: %v", err)
	}
}

// Migrations run from a new file up, each in its own transaction: one that
// fails leaves the file at the version before it, with none of its changes.
func TestFailedMigrationChangesNothing(t *testing.T) {
	path := dbPath(t)
	v := SchemaVersion()
	broken := append(migrations[:len(migrations):len(migrations)], migration{version: v + 1, name: "test: broken",
		sql: `CREATE TABLE half (a); INSERT INTO no_such_table VALUES (1);`})
	_, err := open(path, testOpts, broken)
	want := fmt.Sprintf("state store %s: upgrade schema: schema version %d to %d (test: broken): ", path, v, v+1)
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "no such table: no_such_table") {
		t.Fatalf("error %v, want %q", err, want)
	}
	if got := userVersion(t, path); got != v {
		t.Fatalf("user_version %d, want %d", got, v)
	}
	var n int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM sqlite_schema WHERE name = 'half'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the failed migration left its table (%d, %v)", n, err)
	}
	// The file itself is fine for this build.
	s := openT(t, path, testOpts)
	if err := s.Jobs().Submit(ctx, submitted("j", "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
		t.Fatal(err)
	}
}

// Open fails with one line naming the file for a file that is not a
// database, a damaged one and a directory.
func TestCorruptFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	b := make([]byte, 16384)
	rand.Read(b)
	if err := os.WriteFile(garbage, b, 0o600); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "text.db")
	if err := os.WriteFile(text, []byte(strings.Repeat("not a database\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}

	// A real store whose schema page (page 1, after the 100-byte file
	// header) is overwritten.
	damaged := filepath.Join(dir, "damaged.db")
	s := openT(t, damaged, testOpts)
	for i := range 50 {
		id := fmt.Sprintf("j-%d", i)
		if err := s.Jobs().Submit(ctx, submitted(id, "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(damaged + "-wal"); !os.IsNotExist(err) {
		t.Fatalf("Close left a WAL (%v): the damage below would be beside the point", err)
	}
	f, err := os.OpenFile(damaged, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b[:2000], 100); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, c := range []struct{ path, says string }{
		{garbage, "file is not a database"},
		{text, "file is not a database"},
		{damaged, "malformed"},
		{dir, "is a directory"},
	} {
		_, err := Open(c.path, testOpts)
		if err == nil || !strings.HasPrefix(err.Error(), "state store "+c.path+": ") ||
			!strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%s): %v, want one line naming the file and saying %q", filepath.Base(c.path), err, c.says)
		}
		t.Log(err)
	}
}
