package modelfake

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// agentCLIs is the npm packages the tests run, pinned, one "name@version"
// a line: the one list, which .ci/run installs under $ORCHESTRD_AGENT_CLIS
// (default /opt/agent-clis).
//
//go:embed agent-clis.txt
var agentCLIs string

// pinned is the package@version the list pins for name.
func pinned(name string) string {
	for _, l := range strings.Fields(agentCLIs) {
		if strings.HasPrefix(l, name+"@") {
			return l
		}
	}
	panic("agent-clis.txt pins no " + name)
}

// CLIsDir is where the pinned agent CLIs are installed.
func CLIsDir() string {
	if d := os.Getenv("ORCHESTRD_AGENT_CLIS"); d != "" {
		return d
	}
	return "/opt/agent-clis"
}

// CLI is the argv that runs the pinned CLI of an agent kind
// ("claude-code", "codex", "gemini"), or why it cannot run here (a test
// skips with it): the native binary the npm package carries, or node and
// Gemini CLI's bundle.
func CLI(kind string) ([]string, error) {
	dir := CLIsDir()
	// installed: p is there, from the pinned version of pkg.
	installed := func(p, pkg string) error {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is not installed (npm install --prefix %s %s): %w", kind, dir, pkg, err)
		}
		at := strings.LastIndex(pkg, "@")
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", pkg[:at], "package.json"))
		if err != nil {
			return fmt.Errorf("%s: reading its package.json: %w", kind, err)
		}
		var meta struct {
			Version string `json:"version"`
		}
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("%s: reading its package.json: %w", kind, err)
		}
		if meta.Version != pkg[at+1:] {
			return fmt.Errorf("%s %s is installed in %s, the tests pin %s (npm install --prefix %s %s)", kind, meta.Version, dir, pkg[at+1:], dir, pkg)
		}
		return nil
	}
	switch kind {
	case "claude-code":
		p := filepath.Join(dir, "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude")
		return []string{p}, installed(p, pinned("@anthropic-ai/claude-code"))
	case "codex":
		p := filepath.Join(dir, "node_modules", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")
		return []string{p}, installed(p, pinned("@openai/codex"))
	case "gemini":
		js := filepath.Join(dir, "node_modules", "@google", "gemini-cli", "bundle", "gemini.js")
		if err := installed(js, pinned("@google/gemini-cli")); err != nil {
			return nil, err
		}
		node, err := exec.LookPath("node")
		if err == nil {
			node, err = filepath.EvalSymlinks(node)
		}
		if err != nil {
			return nil, fmt.Errorf("gemini needs node (>= 20): %w", err)
		}
		return []string{node, js}, nil
	}
	return nil, fmt.Errorf("no pinned CLI for agent kind %q", kind)
}
