package runner

import (
	"slices"
	"testing"
)

// A runner started by systemd (a bring-your-own one run as a service) has
// NOTIFY_SOCKET; its jobs must not, or they could speak to systemd for it.
func TestJobBaseEnvDropsNotifySocket(t *testing.T) {
	got := jobBaseEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/user/1000/systemd/notify", "HOME=/h"})
	if want := []string{"PATH=/bin", "HOME=/h"}; !slices.Equal(got, want) {
		t.Fatalf("jobBaseEnv = %q, want %q", got, want)
	}
}
