package supervisor

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds of the root's list of services (services.go). Position
// is the service's place in the list, from 1: services start in that
// order and stop in reverse.

// ServiceStarted: a service started (and recovered what a dead daemon
// left, when it does) in DurationMs.
type ServiceStarted struct {
	Service    string `json:"service"`
	Position   int    `json:"position"`
	DurationMs int64  `json:"duration_ms"`
	// Off: the configuration leaves it off, and why (a Switchable's).
	Off string `json:"off,omitempty"`
}

func (ServiceStarted) Kind() string { return "service.started" }

// ServiceStartFailed: a service failed to start, or to recover (Recovering):
// the services started before it stop in reverse and the daemon exits.
type ServiceStartFailed struct {
	Service    string `json:"service"`
	Position   int    `json:"position"`
	Error      string `json:"error"`
	Recovering bool   `json:"recovering,omitempty"`
}

func (ServiceStartFailed) Kind() string { return "service.start_failed" }

// ServiceStopped: a service stopped, in DurationMs of its TimeoutMs.
// Error says why it did not stop cleanly; Abandoned that it did not stop
// within its timeout and the runner went on without it.
type ServiceStopped struct {
	Service    string `json:"service"`
	Position   int    `json:"position"`
	DurationMs int64  `json:"duration_ms"`
	TimeoutMs  int64  `json:"timeout_ms"`
	Error      string `json:"error,omitempty"`
	Abandoned  bool   `json:"abandoned,omitempty"`
}

func (ServiceStopped) Kind() string { return "service.stopped" }

func init() { eventlog.Register(ServiceStarted{}, ServiceStartFailed{}, ServiceStopped{}) }
