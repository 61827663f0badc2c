package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/modelfake"
)

// What the tests of the built-in agent kinds (claude-code, codex, gemini)
// share: the real CLI, and a home whose secrets.toml holds its key.

// agentCLI is the argv of agent kind's pinned CLI under
// ORCHESTRD_AGENT_CLIS (default /opt/agent-clis), or the test is skipped
// saying why.
func agentCLI(t *testing.T, kind string) []string {
	t.Helper()
	argv, err := modelfake.CLI(kind)
	if err != nil {
		t.Skip(err)
	}
	return argv
}

// agentHome is a new daemon home whose secrets.toml gives name the value.
func agentHome(t *testing.T, name, value string) string {
	t.Helper()
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte(name+" = \""+value+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// agentWait bounds a wait on what an agent CLI does (a tool call in the
// inbox, a task's end): starting Gemini CLI's node costs seconds of CPU,
// and a CI machine may be loaded many times over (the landing CI whose
// Gemini subtests timed out at 60 s left this 2-core machine at a load
// average of 18).
const agentWait = 3 * time.Minute

// waitAgentTask waits up to agentWait for task id's end.
func (d *testDaemon) waitAgentTask(id string) api.TaskRecord {
	d.t.Helper()
	return daemontest.WaitTaskWithin(d.t, d, id, agentWait)
}
