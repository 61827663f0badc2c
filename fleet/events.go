package fleet

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The fleet's kinds (cluster.*). Noun.verb_past, stable snake_case fields,
// only ever added to. Never a job's command, environment or output, never
// a credential.

// ClusterStarted: this node is in the fleet (its heartbeat is in).
type ClusterStarted struct {
	Node        string   `json:"node"`
	Incarnation string   `json:"incarnation"`
	Mode        string   `json:"mode"` // embedded, external
	URL         string   `json:"url"`  // without credentials
	Lanes       []string `json:"lanes,omitempty"`
	Replicas    int      `json:"replicas"`
	// ServerVersion is the NATS server's this node is connected to.
	ServerVersion string `json:"server_version,omitempty"`
}

func (ClusterStarted) Kind() string { return "cluster.started" }

// ClusterNodeJoined: this node joined the fleet under a new incarnation
// (emitted once, by the node itself).
type ClusterNodeJoined struct {
	Node        string   `json:"node"`
	Incarnation string   `json:"incarnation"`
	Lanes       []string `json:"lanes,omitempty"`
}

func (ClusterNodeJoined) Kind() string { return "cluster.node_joined" }

// ClusterNodeLost: a node stopped heartbeating (or came back under a new
// incarnation) and was declared lost; the jobs it had taken ended failed
// with node_lost. Emitted once in the fleet, by the node that declared it.
type ClusterNodeLost struct {
	Node        string   `json:"node"`
	Incarnation string   `json:"incarnation"`
	By          string   `json:"by"`     // the node that declared it
	Reason      string   `json:"reason"` // heartbeat_expired, restarted
	Jobs        []string `json:"jobs"`
}

func (ClusterNodeLost) Kind() string { return "cluster.node_lost" }

// ClusterJobLost: a job of a lost node (or of an incarnation since
// restarted) that its node's declaration could not end was found by a
// later sweep and ended failed with node_lost, by this node.
type ClusterJobLost struct {
	JobID       string `json:"job_id"`
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	By          string `json:"by"`
}

func (ClusterJobLost) Kind() string { return "cluster.job_lost" }

// ClusterNodeReturned: this node, declared lost, heartbeats again (it was
// stopped or cut off); its jobs' late results are not recorded.
type ClusterNodeReturned struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
}

func (ClusterNodeReturned) Kind() string { return "cluster.node_returned" }

// ClusterJobTaken: this node took a job of a shared lane from its queue.
type ClusterJobTaken struct {
	JobID string `json:"job_id"`
	Lane  string `json:"lane"`
}

func (ClusterJobTaken) Kind() string { return "cluster.job_taken" }

// ClusterTakeLost: this node took a job, but another node's take of the
// same record, which the NATS server (older than 2.10) let succeed too,
// landed last: the job runs there, not here.
type ClusterTakeLost struct {
	JobID   string `json:"job_id"`
	Lane    string `json:"lane"`
	TakenBy string `json:"taken_by"`
}

func (ClusterTakeLost) Kind() string { return "cluster.take_lost" }

// ClusterResultDropped: a job this node ran ended, but its end was not
// recorded: the record had ended already (node_lost while this node was
// stopped or cut off), a node_lost failure written at the same moment
// landed after it (why "overwritten: ...", a server older than 2.10), or
// the fleet could not be reached.
type ClusterResultDropped struct {
	JobID    string `json:"job_id"`
	State    string `json:"state"`              // the end this node saw
	Recorded string `json:"recorded,omitempty"` // the end the record has
	Why      string `json:"why"`
}

func (ClusterResultDropped) Kind() string { return "cluster.result_dropped" }

// ClusterJobEndedLate: a job recorded under this node's live incarnation,
// which it neither runs nor is taking, was found by its own sweep and
// ended now. Why: end_unrecorded (its end, dropped as unreachable, is
// written now, as it was), take_unconfirmed (a take whose write landed
// but whose reply was lost: it never ran, error not_run), end_lost (an
// end dropped when more were waiting than the node keeps: error).
type ClusterJobEndedLate struct {
	JobID string `json:"job_id"`
	State string `json:"state"`
	Why   string `json:"why"`
}

func (ClusterJobEndedLate) Kind() string { return "cluster.job_ended_late" }

// ClusterDisconnected: this node lost its connection to NATS.
type ClusterDisconnected struct {
	Node  string `json:"node"`
	Error string `json:"error,omitempty"`
}

func (ClusterDisconnected) Kind() string { return "cluster.disconnected" }

// ClusterReconnected: this node is connected to NATS again.
type ClusterReconnected struct {
	Node string `json:"node"`
	URL  string `json:"url"`
}

func (ClusterReconnected) Kind() string { return "cluster.reconnected" }

// ClusterStopped: this node left the fleet cleanly.
type ClusterStopped struct {
	Node          string `json:"node"`
	EventsDropped uint64 `json:"events_dropped,omitempty"` // event lines not published (queue full, no connection)
}

func (ClusterStopped) Kind() string { return "cluster.stopped" }

// ClusterEventsDropped: event lines of this node's were not published to
// the fleet (its queue overflowed while the stream could not take them,
// or they failed for eventsRetryFor); told once lines go through again.
// They are in this node's own event log. Total: since the node started.
type ClusterEventsDropped struct {
	Node  string `json:"node"`
	Lines uint64 `json:"lines"`
	Total uint64 `json:"total"`
}

func (ClusterEventsDropped) Kind() string { return "cluster.events_dropped" }

// ClusterOutputRepublished: pieces of a job's output whose publication
// failed (the output stream electing a leader) were published again,
// after pieces that follow them; readers put them back in order. Lost:
// pieces that failed for endRetryFor, missing from its output (the record
// tells: the output falls short of output_bytes).
type ClusterOutputRepublished struct {
	JobID  string `json:"job_id"`
	Pieces int    `json:"pieces"`
	Lost   int    `json:"lost"`
}

func (ClusterOutputRepublished) Kind() string { return "cluster.output_republished" }

func init() {
	eventlog.Register(ClusterOutputRepublished{}, ClusterEventsDropped{}, ClusterStarted{}, ClusterNodeJoined{}, ClusterNodeLost{}, ClusterJobLost{}, ClusterJobEndedLate{}, ClusterNodeReturned{},
		ClusterJobTaken{}, ClusterTakeLost{}, ClusterResultDropped{}, ClusterDisconnected{}, ClusterReconnected{}, ClusterStopped{},
		ClusterRecordRefused{}, ClusterOutputRefused{})
}

// ClusterRecordRefused: a value in the fleet's buckets or a take claim
// that its writer may not have written (another node's heartbeat or job
// record, a record naming a taker the job's claim does not name, one not
// sealed by a node of the fleet) was refused: readers treat it as not
// there. Told once per key, writer and reason by each node that reads it.
type ClusterRecordRefused struct {
	What   string `json:"what"`   // jobs, nodes, takes
	Key    string `json:"key"`    // the job id or node name (eventlog.Ident)
	Writer string `json:"writer"` // the node whose seal it bears ("": none that checks)
	Why    string `json:"why"`
}

func (ClusterRecordRefused) Kind() string { return "cluster.record_refused" }

// ClusterOutputRefused: a piece of a cluster job's output that its taker
// did not write (unsigned, or not signed by the key of the job's take
// claim) was dropped by this node's reader; told once per job and reason.
type ClusterOutputRefused struct {
	JobID string `json:"job_id"`
	Taker string `json:"taker"`
	Why   string `json:"why"`
}

func (ClusterOutputRefused) Kind() string { return "cluster.output_refused" }
