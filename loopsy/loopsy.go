// Package loopsy is Loopsy's domain (spec 004): the shared context (keys
// and values with TTLs, which peers read and write), the registry of peers
// (added by hand, by their handshake, by mDNS; their health checked) and
// mDNS discovery. What must survive a restart is in the state store
// (Store). Its operations are methods of the daemon's method table
// (loopsy.*, Register), so every front-end reaches it one way: the HTTP API
// (daemon/httpapi, Loopsy's /api/v1) serves them to Loopsy's clients and
// peers, and the control socket to the CLI.
//
// What it owns: the context and the peers, each map behind its own lock
// and changed only here, written through to the store in the order of the
// changes (a refused write puts back what was there); the background work
// (pruning the expired entries, the peers' health checks, mDNS), started
// by Start and ended by Stop.
//
// Whom it tells: the event log (http.peer_added, http.peer_removed,
// http.peer_status_changed, http.handshake_refused,
// http.discovery_started, http.discovery_unavailable).
package loopsy

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Loopsy's error codes that the domain answers with (its
// packages/protocol/src/errors.ts), in the Data of its methods' errors
// (ErrorData): the HTTP API answers them as they are.
const (
	CodePeerNotFound        = 2001
	CodePeerVersionMismatch = 2005
	CodeContextNotFound     = 5001
	CodeContextTooLarge     = 5002
	CodeContextMaxEntries   = 5003
	CodeInternal            = 9001
	CodeInvalidRequest      = 9003
)

// ErrorData is the Data of the api.Error a loopsy method fails with:
// Loopsy's own code for the refusal.
type ErrorData struct {
	LoopsyCode int `json:"loopsy_code"`
}

// Config is what the domain is told by the daemon (its [http] table and
// the API's address).
type Config struct {
	// MaxValueBytes and MaxEntries bound the shared context (5002, 5003
	// past them); PruneInterval is how often expired entries are removed
	// from the store (readers never see them once expired).
	MaxValueBytes int
	MaxEntries    int
	PruneInterval time.Duration
	// HealthInterval is how often each known peer's /health is asked;
	// HealthFailures failures in a row mark it offline. TLS: this node
	// serves HTTPS, and its peers are asked over HTTPS first.
	HealthInterval time.Duration
	HealthFailures int
	TLS            bool
	// Manual are the peers the config names, added at start when not known.
	Manual []PeerAddr
	// Discovery announces this node and browses for peers by mDNS every
	// DiscoveryInterval; Addr and Port are where the API serves (what is
	// announced), ProtocolVersion and Capabilities what it says it speaks.
	Discovery         bool
	DiscoveryInterval time.Duration
	Addr              string
	Port              int
	ProtocolVersion   string
	Capabilities      []string
}

// PeerAddr is a peer's address and port.
type PeerAddr struct {
	Host string
	Port int
}

// Options configures a Domain.
type Options struct {
	Config Config
	Store  Store // nil: the context and peers live in memory only
	NodeID string
	Bus    *eventlog.Bus
	Logger zerolog.Logger
}

// Domain is Loopsy's domain: the one owner of the shared context and the
// peers.
type Domain struct {
	cfg    Config
	nodeID string
	bus    *eventlog.Bus
	log    zerolog.Logger
	ctx    *ctxStore
	peers  *peers

	mu      sync.Mutex
	stop    chan struct{} // nil until Start; closed by Stop
	bg      sync.WaitGroup
	stopped bool
	// stopDiscovery ends mDNS; nil when discovery is off.
	stopDiscovery func()
}

// New reads the context and the peers from the store and adds the peers
// the config names.
func New(opts Options) (*Domain, error) {
	d := &Domain{cfg: opts.Config, nodeID: opts.NodeID, bus: opts.Bus, log: opts.Logger.With().Str("component", "loopsy").Logger()}
	var err error
	if d.ctx, err = newCtxStore(opts.Store, opts.Config); err != nil {
		return nil, err
	}
	if d.peers, err = newPeers(opts.Store); err != nil {
		return nil, err
	}
	if err := d.addManual(); err != nil {
		return nil, err
	}
	return d, nil
}

// Start starts the background work: pruning the expired entries, the
// peers' health checks and, when on, mDNS discovery (mDNS that cannot
// start is said, and the domain goes on without it).
func (d *Domain) Start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop != nil || d.stopped {
		return
	}
	d.stop = make(chan struct{})
	d.bg.Add(2)
	go func() {
		defer d.bg.Done()
		d.ctx.pruneLoop(d.cfg.PruneInterval, d.stop, func(err error) {
			d.log.Error().Err(err).Msg("loopsy: pruning the expired context entries")
		})
	}()
	go func() {
		defer d.bg.Done()
		d.healthLoop(d.stop)
	}()
	if d.cfg.Discovery {
		stop, err := d.startDiscovery(d.cfg.DiscoveryInterval)
		if err != nil {
			d.log.Warn().Err(err).Msg("loopsy: going on without mDNS discovery")
			d.emit(DiscoveryUnavailable{Error: err.Error()})
		} else {
			d.stopDiscovery = stop
			d.emit(DiscoveryStarted{Service: MDNSService, Port: d.cfg.Port})
		}
	}
}

// Stop ends the background work and waits for it. The methods go on
// answering from memory and the store.
func (d *Domain) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped = true
	if d.stopDiscovery != nil {
		d.stopDiscovery()
	}
	if d.stop != nil {
		close(d.stop)
		d.bg.Wait()
	}
}

func (d *Domain) emit(ev eventlog.Event) {
	if d.bus != nil {
		d.bus.Emit(ev)
	}
}

// refusal is a refusal of the context or peers with Loopsy's code.
type refusal struct {
	code int
	msg  string
}

func (e *refusal) Error() string { return e.msg }

// fail answers call with err: a refusal as Loopsy's code, with CodeInvalidParams
// (or CodeNotFound for what is not there); anything else is the store's
// failure at what, logged, CodeInternal (Loopsy's 9001).
func (d *Domain) fail(call api.Call, what string, err error) {
	var r *refusal
	if errors.As(err, &r) {
		code := api.CodeInvalidParams
		if r.code == CodeContextNotFound || r.code == CodePeerNotFound {
			code = api.CodeNotFound
		}
		call.Fail(&api.Error{Code: code, Message: r.msg, Data: ErrorData{LoopsyCode: r.code}})
		return
	}
	d.log.Error().Err(err).Msg("loopsy: " + what)
	call.Fail(&api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("%s: %v", what, err), Data: ErrorData{LoopsyCode: CodeInternal}})
}
