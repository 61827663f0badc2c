package modelfake

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The agent CLIs the tests run are npm's packages at pinned versions,
// installed under one directory (.ci/run installs them there):
// $ORCHESTRD_AGENT_CLIS, default /opt/agent-clis.
const (
	ClaudeCodeVersion = "2.1.328"
	CodexVersion      = "0.169.0"
	GeminiCLIVersion  = "0.61.0"
)

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
	installed := func(p, pkg string) error {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is not installed (npm install --prefix %s %s): %w", kind, dir, pkg, err)
		}
		return nil
	}
	switch kind {
	case "claude-code":
		p := filepath.Join(dir, "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude")
		return []string{p}, installed(p, "@anthropic-ai/claude-code@"+ClaudeCodeVersion)
	case "codex":
		p := filepath.Join(dir, "node_modules", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")
		return []string{p}, installed(p, "@openai/codex@"+CodexVersion)
	case "gemini":
		js := filepath.Join(dir, "node_modules", "@google", "gemini-cli", "bundle", "gemini.js")
		if err := installed(js, "@google/gemini-cli@"+GeminiCLIVersion); err != nil {
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
