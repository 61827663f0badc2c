package state

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
	"go.uber.org/goleak"
)

// childEnv makes the test binary a helper process (see crash_test.go).
const childEnv = "STATE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "crash" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// testOpts wait long for locks: tests hold the write lock on purpose.
var testOpts = Options{BusyTimeout: time.Minute}

func openT(t testing.TB, path string, opt Options) *Store {
	t.Helper()
	s, err := Open(path, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func dbPath(t testing.TB) string { return filepath.Join(t.TempDir(), "state.db") }

// rawDB opens the file as any other process would, for tests that look
// under the store or hold its locks.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// holdWriteLock takes the database's write lock from another connection,
// as another process could: the store's writer waits in BEGIN IMMEDIATE
// (busy timeout) until release.
func holdWriteLock(t testing.TB, path string) (release func()) {
	t.Helper()
	db := rawDB(t, path)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	released := false
	return func() {
		if released {
			return
		}
		released = true
		if _, err := c.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Error(err)
		}
		c.Close()
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testio.Eventually(t, 20*time.Second, what, cond)
}
