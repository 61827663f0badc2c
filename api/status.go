package api

// Status is the status method's answer (Loopr's, and the CLI's status):
// llm_ready says the chat can answer (its pool is configured and has an
// executor up); services are the daemon's services in the order they
// start (they stop in reverse), each with its state.
type Status struct {
	Running  bool            `json:"running"`
	Version  string          `json:"version"`
	LLMReady bool            `json:"llm_ready"`
	Services []ServiceStatus `json:"services,omitempty"`
}

// The states of a service of the daemon (ServiceStatus.State).
const (
	ServicePending     = "pending"      // not started yet
	ServiceStarting    = "starting"     // starting or recovering
	ServiceRunning     = "running"      // started
	ServiceOff         = "off"          // started, and off by the configuration (Off says why)
	ServiceStartFailed = "start_failed" // its start failed: the daemon stops
	ServiceStopping    = "stopping"     // being stopped
	ServiceStopped     = "stopped"      // stopped (Error: not cleanly)
)

// ServiceStatus is one service of the daemon: its name, its state and,
// when its start or stop failed, why; when the configuration leaves it
// off (a listener with no address), why.
type ServiceStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	Off   string `json:"off,omitempty"`
}
