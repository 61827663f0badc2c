package main

import (
	"os"
	"path/filepath"
	"testing"

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
