package loopsy

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds of Loopsy's domain. Their kinds are the HTTP API's
// (http.*), as they were when the domain lived in it. Field names are
// stable snake_case; a key is never in an event, only its name.

// PeerAdded: a peer became known, by POST /peers (Source manual), by its
// handshake, or by mDNS.
type PeerAdded struct {
	NodeID  string `json:"node_id"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Source  string `json:"source"` // manual, handshake, mdns, config
	KeyName string `json:"key_name,omitempty"`
}

func (PeerAdded) Kind() string { return "http.peer_added" }

// PeerRemoved: DELETE /peers/:nodeId.
type PeerRemoved struct {
	NodeID  string `json:"node_id"`
	KeyName string `json:"key_name,omitempty"`
}

func (PeerRemoved) Kind() string { return "http.peer_removed" }

// PeerStatusChanged: a health check found a peer online again, or
// HealthFailures checks in a row failed (offline).
type PeerStatusChanged struct {
	NodeID   string `json:"node_id"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Status   string `json:"status"`
	Failures int    `json:"failures"`
}

func (PeerStatusChanged) Kind() string { return "http.peer_status_changed" }

// PeerHandshakeRefused: a handshake from an incompatible version.
type PeerHandshakeRefused struct {
	NodeID  string `json:"node_id"`
	Peer    string `json:"peer"`
	Version string `json:"version"`
	Reason  string `json:"reason"`
}

func (PeerHandshakeRefused) Kind() string { return "http.handshake_refused" }

// DiscoveryStarted: this node is announced by mDNS and browses for peers.
type DiscoveryStarted struct {
	Service string `json:"service"`
	Port    int    `json:"port"`
}

func (DiscoveryStarted) Kind() string { return "http.discovery_started" }

// DiscoveryUnavailable: mDNS could not start (no multicast interface, a
// port refused); peers can still be added by hand.
type DiscoveryUnavailable struct {
	Error string `json:"error"`
}

func (DiscoveryUnavailable) Kind() string { return "http.discovery_unavailable" }

func init() {
	eventlog.Register(PeerAdded{}, PeerRemoved{}, PeerStatusChanged{}, PeerHandshakeRefused{}, DiscoveryStarted{}, DiscoveryUnavailable{})
}
