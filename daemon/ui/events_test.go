package ui

import (
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind of the dashboard is registered, sampled here, and logged as
// it promises.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		SignedIn{Session: "ab12cd34", Peer: "127.0.0.1:5000", How: "key", ExpiresAt: time.Unix(1_800_000_000, 0).UTC()},
		SignedOut{Session: "ab12cd34"},
		SignInFailed{Peer: "127.0.0.1:5000", Reason: "wrong_key"},
		SessionsRestored{Restored: 2, Expired: 1, OtherKey: 3, OverLimit: 1},
		testJobEvent{JobID: "j-1"}, // this package's tests' own
	)
}
