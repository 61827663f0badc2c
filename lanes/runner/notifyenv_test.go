package runner

import (
	"slices"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// A runner started by systemd (a bring-your-own one run as a service) has
// NOTIFY_SOCKET; its jobs must not, or they could speak to systemd for it.
func TestJobBaseEnvDropsNotifySocket(t *testing.T) {
	got := jobBaseEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/user/1000/systemd/notify", "HOME=/h"}, wire.RunnerConfig{})
	if want := []string{"PATH=/bin", "HOME=/h"}; !slices.Equal(got, want) {
		t.Fatalf("jobBaseEnv = %q, want %q", got, want)
	}
}

// A job starts from the base variables of the runner's environment and
// those the lane inherits, then the lane's env; nothing else of the
// runner's (a daemon's API key) reaches it, not even by inherit_env for
// the runner's own variables.
func TestJobBaseEnv(t *testing.T) {
	env := []string{"PATH=/bin", "ANTHROPIC_API_KEY=sk-secret", "LC_ALL=C", "LANG=C.UTF-8", "HOME=/h",
		"MYAPP_A=1", "MYAPP_B=2", "OTHER=x", "ORCHESTRD_LOG_LEVEL=warn", "ORCHESTRD_JOIN_TOKEN=t", "SHELL=/bin/sh", "FOO=old"}
	got := jobBaseEnv(env, wire.RunnerConfig{InheritEnv: []string{"MYAPP_*", "FOO", "ORCHESTRD_*"},
		Env: map[string]string{"FOO": "lane", "ZED": "z", "HOME": "/lanehome"}})
	want := []string{"PATH=/bin", "LC_ALL=C", "LANG=C.UTF-8", "MYAPP_A=1", "MYAPP_B=2", "SHELL=/bin/sh",
		"FOO=lane", "HOME=/lanehome", "ZED=z"}
	if !slices.Equal(got, want) {
		t.Fatalf("jobBaseEnv =\n%q\nwant\n%q", got, want)
	}
}
