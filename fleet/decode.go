package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// What the fleet reads back from NATS: any node (or anyone holding the
// credentials) may have written it, so each decoder refuses what it does
// not expect instead of trusting it (fuzzed in decode_test.go).

const (
	maxNodeValue  = 64 << 10
	maxJobValue   = 256 << 10
	maxJobMessage = 4 << 20
	maxNodeLanes  = 256
)

// Node states in the nodes bucket.
const (
	nodeAlive   = "alive"
	nodeLost    = "lost"
	nodeStopped = "stopped"
)

// nodeInfo is a node's value in the nodes bucket: its heartbeat.
type nodeInfo struct {
	Name        string         `json:"name"`
	Incarnation string         `json:"incarnation"`
	Lanes       []string       `json:"lanes"`
	Free        map[string]int `json:"free,omitempty"`
	StartedAt   time.Time      `json:"started_at"`
	HeartbeatAt time.Time      `json:"heartbeat_at"`
	State       string         `json:"state"`
	LostBy      string         `json:"lost_by,omitempty"`
	// LostAt: when LostBy declared it lost (LostBy's clock).
	LostAt time.Time `json:"lost_at,omitzero"`
	// Figures: the node's CPU count, memory, load and home's free space
	// when it put this heartbeat; absent if it could not read them.
	Figures *api.NodeFigures `json:"figures,omitempty"`
}

// maxNodeCPUs bounds the CPU count a node's heartbeat may give.
const maxNodeCPUs = 1 << 16

// decodeNode decodes key's value in the nodes bucket.
func decodeNode(key string, b []byte) (nodeInfo, error) {
	var n nodeInfo
	if len(b) > maxNodeValue {
		return n, fmt.Errorf("node %s: value of %d bytes (at most %d)", key, len(b), maxNodeValue)
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return nodeInfo{}, fmt.Errorf("node %s: %w", key, err)
	}
	switch {
	case n.Name != key:
		return nodeInfo{}, fmt.Errorf("node %s: value names node %q", key, n.Name)
	case !validName(n.Name):
		return nodeInfo{}, fmt.Errorf("node %s: not a node name", key)
	case n.Incarnation == "" || len(n.Incarnation) > 64:
		return nodeInfo{}, fmt.Errorf("node %s: bad incarnation", key)
	case n.State != nodeAlive && n.State != nodeLost && n.State != nodeStopped:
		return nodeInfo{}, fmt.Errorf("node %s: state %q", key, n.State)
	case len(n.Lanes) > maxNodeLanes || len(n.Free) > maxNodeLanes:
		return nodeInfo{}, fmt.Errorf("node %s: more than %d lanes", key, maxNodeLanes)
	}
	for _, l := range n.Lanes {
		if !validToken(l) {
			return nodeInfo{}, fmt.Errorf("node %s: lane %q is not a lane name", key, l)
		}
	}
	for l, v := range n.Free {
		if !validToken(l) || v < 0 {
			return nodeInfo{}, fmt.Errorf("node %s: free slots of %q", key, l)
		}
	}
	if g := n.Figures; g != nil && (g.CPUs < 0 || g.CPUs > maxNodeCPUs || g.MemAvailBytes > g.MemTotalBytes ||
		g.HomeFreeBytes > g.HomeTotalBytes || g.Load1 < 0 || g.Load5 < 0 || g.Load15 < 0) {
		n.Figures = nil // not shown; the heartbeat itself stands
	}
	return n, nil
}

// jobEntry is a cluster job's value in the jobs bucket: its record
// (without output; Node is the node that took it) and what the fleet needs
// beside it.
type jobEntry struct {
	Record api.JobRecord `json:"record"`
	// Incarnation of the node that took the job (a node declared lost
	// fails the jobs of its incarnation).
	Incarnation string `json:"incarnation,omitempty"`
	// MaxOutput is the spec's max_output_bytes (0: the lane's default).
	MaxOutput uint64 `json:"max_output,omitempty"`
	// Kept is how many bytes of the output stream the record keeps (Get
	// reads that much), set at the end.
	Kept int64 `json:"kept,omitempty"`
	// StdinStream: the job takes its stdin streamed (job.stdin).
	StdinStream bool `json:"stdin_stream,omitempty"`
	// StdinRefused: why the job's lane refused its stdin (the node that
	// runs it drops the rest); the next job.stdin, on any node, is told.
	// StdinUnsupported: because its runner takes no streamed stdin.
	StdinRefused     string `json:"stdin_refused,omitempty"`
	StdinUnsupported bool   `json:"stdin_unsupported,omitempty"`
}

// decodeJob decodes key's value in the jobs bucket.
func decodeJob(key string, b []byte) (jobEntry, error) {
	var e jobEntry
	if len(b) > maxJobValue {
		return e, fmt.Errorf("job %s: value of %d bytes (at most %d)", key, len(b), maxJobValue)
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return jobEntry{}, fmt.Errorf("job %s: %w", key, err)
	}
	r := &e.Record
	switch {
	case r.ID != key:
		return jobEntry{}, fmt.Errorf("job %s: value names job %q", key, r.ID)
	case !api.ValidState(string(r.State)):
		return jobEntry{}, fmt.Errorf("job %s: state %q", key, r.State)
	case r.Node != "" && !validName(r.Node):
		return jobEntry{}, fmt.Errorf("job %s: node is not a node name", key)
	case e.Kept < 0 || r.OutputBytes < 0:
		return jobEntry{}, fmt.Errorf("job %s: negative output size", key)
	}
	r.Output = ""
	return e, nil
}

// jobMessage is a submission in a lane's work queue.
type jobMessage struct {
	ID   string      `json:"id"`
	Spec api.JobSpec `json:"spec"`
	// The queued record's creation and revision, as submitted: a taker
	// writes its take over that revision without reading it first (a
	// record changed since fails the write, and is read then).
	CreatedAt time.Time `json:"created_at,omitzero"`
	Rev       uint64    `json:"rev,omitempty"`
}

// queuedEntry is the record a submission of spec as id makes.
func queuedEntry(id string, spec api.JobSpec, created time.Time) jobEntry {
	return jobEntry{Record: api.JobRecord{ID: id, Lane: spec.Lane, State: api.StateQueued, Command: spec.Command,
		Argv: spec.Argv, Cwd: spec.Cwd, CreatedAt: created}, MaxOutput: spec.MaxOutputBytes, StdinStream: spec.StdinStream}
}

// decodeJobMessage decodes a lane queue's message for lane.
func decodeJobMessage(lane string, b []byte) (jobMessage, error) {
	var m jobMessage
	if len(b) > maxJobMessage {
		return m, fmt.Errorf("a job message of %d bytes (at most %d)", len(b), maxJobMessage)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return jobMessage{}, fmt.Errorf("a job message: %w", err)
	}
	switch {
	case !validJobID(m.ID):
		return jobMessage{}, fmt.Errorf("a job message: %q is not a cluster job id", m.ID)
	case m.Spec.Lane != lane:
		return jobMessage{}, fmt.Errorf("job %s: lane %q in lane %s's queue", m.ID, m.Spec.Lane, lane)
	case !idLaneOK(m.ID, lane):
		return jobMessage{}, fmt.Errorf("job %s: an id made for another lane than %s", m.ID, lane)
	}
	return m, nil
}

// A cluster job's id is c-<start><lane tag>-<seq>: 6 hex digits per start
// of its submitting node, then laneTag(lane), 12 hex digits, the job's
// lane at its submission. A queued record is any node's to write (a
// cancel): the tag binds the job to its lane, which readers check before
// they let a node's certificate say whether it may take the job. An id
// with another number of hex digits (before lanes were tagged) is bound
// to no lane.
const (
	idStartHex = 6
	laneTagHex = 12
)

// laneTag is lane's tag in a job id: the first 6 bytes of a SHA-256 of
// the lane's name, in hex.
func laneTag(lane string) string {
	h := sha256.Sum256([]byte("orchestrd lane\n" + lane))
	return hex.EncodeToString(h[:laneTagHex/2])
}

// idLaneOK says whether id may be a job of lane: its tag is lane's, or it
// has none.
func idLaneOK(id, lane string) bool {
	hexPart, _, ok := strings.Cut(strings.TrimPrefix(id, api.ClusterJobPrefix), "-")
	if !ok || len(hexPart) != idStartHex+laneTagHex {
		return true
	}
	return hexPart[idStartHex:] == laneTag(lane)
}

// validJobID: c-<hex>-<decimal> (the hex: idStartHex + laneTagHex).
func validJobID(id string) bool {
	if !strings.HasPrefix(id, api.ClusterJobPrefix) || len(id) > 64 {
		return false
	}
	parts := strings.Split(id[2:], "-")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, r := range parts[0] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	for _, r := range parts[1] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
