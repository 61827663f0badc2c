package clanker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/beneath"
)

// Config is the [clanker] table. daemon/config.go decodes it key by key
// into this; clanker owns its defaults and its validation.
type Config struct {
	// Repos ([[clanker.repos]]) are the repositories whose dashboard
	// orchestrd is.
	Repos []RepoConfig `toml:"repos"`
}

// RepoConfig is one [[clanker.repos]] entry. Zero values take the
// defaults (Normalize).
type RepoConfig struct {
	// Path is the repository's root (absolute); its state is Path/.clanker.
	Path string `toml:"path" json:"path"`
	// Socket is the pods' socket; "" is Path/.clanker/ipc.sock.
	Socket string `toml:"socket" json:"socket,omitempty"`
	// BasePrompt goes before every task's prompt a slave is handed, and
	// JudgePrompt before a task a judge is handed (text), or the contents
	// of BasePromptFile / JudgePromptFile, read when the repo starts.
	BasePrompt      string `toml:"base_prompt" json:"base_prompt,omitempty"`
	BasePromptFile  string `toml:"base_prompt_file" json:"base_prompt_file,omitempty"`
	JudgePrompt     string `toml:"judge_prompt" json:"judge_prompt,omitempty"`
	JudgePromptFile string `toml:"judge_prompt_file" json:"judge_prompt_file,omitempty"`
	// Tick is how often the repo drains its spool, rescans its task files
	// and checks its pods; default 1s.
	Tick api.Duration `toml:"tick" json:"tick,omitempty"`
	// UsageLimitPause is how long a usage_limit pauses the repo's fleet
	// before it resumes on its own; default 30m.
	UsageLimitPause api.Duration `toml:"usage_limit_pause" json:"usage_limit_pause,omitempty"`
	// StaleAfter is how long a pod may stay silent before it is stale
	// (clanker.pod_stale); default 30s, clanker's own.
	StaleAfter api.Duration `toml:"stale_after" json:"stale_after,omitempty"`

	// runtime: added at run time (clanker.repo_add), not by the config.
	runtime bool
}

// Defaults.
const (
	DefaultTick            = time.Second
	DefaultUsageLimitPause = 30 * time.Minute
	DefaultStaleAfter      = 30 * time.Second
)

// Normalize fills the defaults: the socket, the tick, the pause.
func (c RepoConfig) Normalize() RepoConfig {
	if c.Path != "" {
		c.Path = filepath.Clean(c.Path)
	}
	if c.Socket == "" && c.Path != "" {
		c.Socket = filepath.Join(c.Path, ".clanker", "ipc.sock")
	}
	if c.Tick.Duration == 0 {
		c.Tick.Duration = DefaultTick
	}
	if c.UsageLimitPause.Duration == 0 {
		c.UsageLimitPause.Duration = DefaultUsageLimitPause
	}
	if c.StaleAfter.Duration == 0 {
		c.StaleAfter.Duration = DefaultStaleAfter
	}
	return c
}

// Validate checks c, the table named key ("clanker"): every problem is one
// error naming its full key (clanker.repos[2].tick). Repos are numbered
// from 1.
func Validate(key string, c Config) []error {
	var errs []error
	seen := map[string]int{}
	socks := map[string]int{}
	for i, r := range c.Repos {
		k := fmt.Sprintf("%s.repos[%d]", key, i+1)
		for _, err := range ValidateRepo(r) {
			errs = append(errs, fmt.Errorf("%s.%w", k, err))
		}
		n := r.Normalize()
		if j, dup := seen[n.Path]; dup && n.Path != "" {
			errs = append(errs, fmt.Errorf("%s.path: %s is also %s.repos[%d]", k, n.Path, key, j))
		}
		seen[n.Path] = i + 1
		if j, dup := socks[n.Socket]; dup && n.Socket != "" {
			errs = append(errs, fmt.Errorf("%s.socket: %s is also the socket of %s.repos[%d]", k, n.Socket, key, j))
		}
		socks[n.Socket] = i + 1
	}
	return errs
}

// ValidateRepo checks one repo's entry; each error starts with the key it
// is about (path: ...).
func ValidateRepo(r RepoConfig) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case r.Path == "":
		bad("path is required (the repository's root)")
	case !filepath.IsAbs(r.Path):
		bad("path must be absolute, got %q", r.Path)
	default:
		if fi, err := os.Stat(r.Path); err != nil {
			bad("path: %v", err)
		} else if !fi.IsDir() {
			bad("path: %s is not a directory", r.Path)
		}
	}
	if r.Socket != "" && !filepath.IsAbs(r.Socket) {
		bad("socket must be absolute, got %q", r.Socket)
	}
	if r.BasePrompt != "" && r.BasePromptFile != "" {
		bad("base_prompt and base_prompt_file: give one of them")
	}
	if r.JudgePrompt != "" && r.JudgePromptFile != "" {
		bad("judge_prompt and judge_prompt_file: give one of them")
	}
	for name, f := range map[string]string{"base_prompt_file": r.BasePromptFile, "judge_prompt_file": r.JudgePromptFile} {
		// One in the repo is the agents' to change: it is read when the
		// repo starts, and a problem is that repo's (repo_failed), not
		// the whole config's.
		if f == "" || inRepo(r.Path, f) {
			continue
		}
		if _, err := os.ReadFile(f); err != nil {
			bad("%s: %v", name, err)
		}
	}
	if r.Tick.Duration < 0 || (r.Tick.Duration > 0 && r.Tick.Duration < 10*time.Millisecond) {
		bad("tick must be at least 10ms, got %s", r.Tick)
	}
	if r.UsageLimitPause.Duration < 0 {
		bad("usage_limit_pause must be > 0, got %s", r.UsageLimitPause)
	}
	if r.StaleAfter.Duration < 0 {
		bad("stale_after must be > 0, got %s", r.StaleAfter)
	}
	return errs
}

// prompts reads the repo's prompts.
func (c RepoConfig) prompts() (base, judge string, err error) {
	base, judge = c.BasePrompt, c.JudgePrompt
	if c.BasePromptFile != "" {
		b, err := readPromptFile(c.Path, c.BasePromptFile)
		if err != nil {
			return "", "", fmt.Errorf("reading base_prompt_file: %w", err)
		}
		base = string(b)
	}
	if c.JudgePromptFile != "" {
		b, err := readPromptFile(c.Path, c.JudgePromptFile)
		if err != nil {
			return "", "", fmt.Errorf("reading judge_prompt_file: %w", err)
		}
		judge = string(b)
	}
	return base, judge, nil
}

// inRepo: file is beneath the repo's root (by its path).
func inRepo(repo, file string) bool {
	if !filepath.IsAbs(repo) || !filepath.IsAbs(file) {
		return false
	}
	rel, err := filepath.Rel(repo, file)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// maxPromptFile bounds a prompt file.
const maxPromptFile = 4 << 20

// readPromptFile reads a prompt file. One in the repo (the README puts
// it in .clanker) is the agents' to write as much as the operator's: it
// is read beneath the repo's root without following a link, a regular
// file the daemon's uid owns, as every file of the repo is (a link to
// /etc/shadow would be handed to the pods as their prompt, a FIFO would
// block). One elsewhere is the operator's own path.
func readPromptFile(repo, file string) ([]byte, error) {
	if !inRepo(repo, file) {
		return os.ReadFile(file)
	}
	rel, _ := filepath.Rel(repo, file)
	root, err := beneath.OpenRoot(repo, beneath.Options{Owners: []int{os.Geteuid()}})
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := root.ReadFile(rel, maxPromptFile)
	var re *beneath.RefusedError
	if errors.As(err, &re) {
		return nil, fmt.Errorf("refusing to read %s: %w", file, &beneath.RefusedError{Path: filepath.Join(repo, re.Path), Reason: re.Reason})
	}
	return b, err
}
