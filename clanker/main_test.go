package clanker_test

import (
	"os"
	"testing"

	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// TestMain is internal/daemontest's, for the daemons of daemon_test.go and
// daemon_files_test.go, with goleak's check of the package's goroutines
// (the package's own tests' too). Run as ORCHESTRD_TEST_HELPER=unixline,
// the test binary is a pod of another uid (TestClankerOtherUID).
func TestMain(m *testing.M) {
	if os.Getenv("ORCHESTRD_TEST_HELPER") == "unixline" {
		os.Exit(testio.UnixLine(os.Args[1:]))
	}
	os.Exit(daemontest.Main(m))
}
