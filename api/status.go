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
	// Node: this machine's figures; NodeError says why they are missing.
	Node      *NodeFigures `json:"node,omitempty"`
	NodeError string       `json:"node_error,omitempty"`
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

// NodeFigures are the figures of the machine a daemon runs on, read when
// asked (status, a fleet node's heartbeat, /metrics).
type NodeFigures struct {
	CPUs           int     `json:"cpus"`
	MemTotalBytes  uint64  `json:"mem_total_bytes"`
	MemAvailBytes  uint64  `json:"mem_available_bytes"`
	Load1          float64 `json:"load1"`
	Load5          float64 `json:"load5"`
	Load15         float64 `json:"load15"`
	HomeFreeBytes  uint64  `json:"home_free_bytes"`
	HomeTotalBytes uint64  `json:"home_total_bytes"`
}
