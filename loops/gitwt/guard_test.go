package gitwt

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Every way an agent could leave code for git to run in the git
// directory is seen, named and put back as it was.
func TestGuardRestores(t *testing.T) {
	cases := []struct {
		name    string
		tamper  func(t *testing.T, gitDir string)
		changed []string
	}{
		{"nothing", func(*testing.T, string) {}, nil},
		{"config rewritten", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "config"), "[core]\n\tfsmonitor = /tmp/pwn\n", 0o644)
		}, []string{"config"}},
		{"hook added", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "hooks", "post-index-change"), "#!/bin/sh\ntouch /tmp/pwn\n", 0o755)
		}, []string{"hooks/post-index-change"}},
		{"sample hook made executable", func(t *testing.T, g string) {
			if err := os.Chmod(filepath.Join(g, "hooks", "pre-commit.sample"), 0o777); err != nil {
				t.Fatal(err)
			}
		}, []string{"hooks/pre-commit.sample"}},
		{"hooks a link", func(t *testing.T, g string) {
			if err := os.RemoveAll(filepath.Join(g, "hooks")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/tmp", filepath.Join(g, "hooks")); err != nil {
				t.Fatal(err)
			}
		}, nil}, // every hook: checked below by count
		{"info/attributes added", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "info", "attributes"), "* filter=race\n", 0o644)
		}, []string{"info/attributes"}},
		{"exclude removed", func(t *testing.T, g string) {
			if err := os.Remove(filepath.Join(g, "info", "exclude")); err != nil {
				t.Fatal(err)
			}
		}, []string{"info/exclude"}},
		{"info opened up", func(t *testing.T, g string) {
			if err := os.Chmod(filepath.Join(g, "info"), 0o777); err != nil {
				t.Fatal(err)
			}
		}, []string{"info"}},
		{"commondir pointed elsewhere", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "worktrees", "w1", "commondir"), "/tmp/evil\n", 0o644)
		}, []string{"worktrees/w1/commondir"}},
		{"a worktree added by git", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "worktrees", "w2", "commondir"), "../..\n", 0o644)
		}, nil},
		{"a worktree added pointing elsewhere", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "worktrees", "w3", "commondir"), "/tmp/evil\n", 0o644)
		}, []string{"worktrees/w3/commondir"}},
		{"config.worktree added", func(t *testing.T, g string) {
			write(t, filepath.Join(g, "worktrees", "w1", "config.worktree"), "[core]\n\thooksPath = /tmp\n", 0o644)
		}, []string{"worktrees/w1/config.worktree"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRepo(t)
			write(t, filepath.Join(r.gitDir, "worktrees", "w1", "commondir"), "../..\n", 0o644)
			g, err := r.Guard()
			if err != nil {
				t.Fatal(err)
			}
			if len(g.entries) < 5 {
				t.Fatalf("the guard copied only %d paths", len(g.entries))
			}
			before, err := g.read()
			if err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, r.gitDir)
			changed, err := g.Restore()
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "hooks a link" {
				if !slices.Contains(changed, "hooks") || len(changed) < 10 {
					t.Fatalf("changed %v: want hooks and each hook in it", changed)
				}
			} else if !slices.Equal(changed, tc.changed) {
				t.Fatalf("changed %v, want %v", changed, tc.changed)
			}
			after, err := g.read()
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "a worktree added by git" {
				return // left as git made it
			}
			if len(after) != len(before) {
				t.Fatalf("%d paths after the restore, %d before", len(after), len(before))
			}
			for rel, e := range before {
				if a, ok := after[rel]; !ok || !a.equal(e) {
					t.Fatalf("%s is not as it was after the restore", rel)
				}
			}
			if again, err := g.Restore(); err != nil || len(again) != 0 {
				t.Fatalf("a second restore found %v (%v)", again, err)
			}
		})
	}
}

// A worktree removed (by orchestrd) is not a change of its config.worktree.
func TestGuardWorktreeRemoved(t *testing.T) {
	r := newRepo(t)
	write(t, filepath.Join(r.gitDir, "worktrees", "w1", "config.worktree"), "[core]\n", 0o644)
	g, err := r.Guard()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(r.gitDir, "worktrees", "w1")); err != nil {
		t.Fatal(err)
	}
	if changed, err := g.Restore(); err != nil || len(changed) != 0 {
		t.Fatalf("changed %v (%v)", changed, err)
	}
}
