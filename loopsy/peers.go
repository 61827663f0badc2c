package loopsy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/state"
)

// PeerInfo is Loopsy's PeerInfo, as loopsy.peer.list (and /peers) answers.
type PeerInfo struct {
	NodeID        string   `json:"nodeId"`
	Hostname      string   `json:"hostname"`
	Address       string   `json:"address"`
	Port          int      `json:"port"`
	Platform      string   `json:"platform"`
	Version       string   `json:"version"`
	Capabilities  []string `json:"capabilities"`
	Status        string   `json:"status"` // online, offline, unknown
	LastSeen      int64    `json:"lastSeen"`
	FailureCount  int      `json:"failureCount"`
	Trusted       bool     `json:"trusted"`
	ManuallyAdded bool     `json:"manuallyAdded"`
	// Source is the most trusted way this node learned of the peer:
	// manual or config (a person named it), handshake (it called with a
	// valid key), mdns (anyone on the network can answer). orchestrd's
	// own; Loopsy's clients ignore it.
	Source string `json:"source,omitempty"`
}

// trust orders how a peer was learned of: an mDNS answer (anyone on the
// network) is the least; a person naming it, the most.
func trust(p PeerInfo) int {
	if p.ManuallyAdded {
		return 3
	}
	return map[string]int{"mdns": 1, "handshake": 2, "config": 3, "manual": 3}[p.Source]
}

// maxPeers bounds the registry: mDNS answers are unauthenticated, and a
// flood of them must not grow it (or the health checks) without end.
const maxPeers = 1000

// peers is the registry of known peers, written through to the store;
// a health loop marks them online or offline.
type peers struct {
	writeThrough
	mu  sync.Mutex
	m   map[string]*PeerInfo
	now func() time.Time
}

func newPeers(st Store) (*peers, error) {
	p := &peers{writeThrough: writeThrough{st}, m: map[string]*PeerInfo{}, now: time.Now}
	if st == nil {
		return p, nil
	}
	rows, err := st.Peers()
	if p.m, err = decodeRows(rows, err, "the peers", func(pi *PeerInfo) string { return pi.NodeID }); err != nil {
		return nil, err
	}
	return p, nil
}

// upsert records pi (under p.mu): what to wait on for its commit.
func (p *peers) upsertLocked(pi *PeerInfo) <-chan error {
	if pi.Capabilities == nil {
		pi.Capabilities = []string{}
	}
	p.m[pi.NodeID] = pi
	doc, err := json.Marshal(pi)
	if err != nil {
		ch := make(chan error, 1)
		ch <- fmt.Errorf("encoding peer %s: %w", pi.NodeID, err)
		return ch
	}
	return p.commit(state.PeerPut(state.LoopsyRow{Key: pi.NodeID, Doc: doc}))
}

// add records a peer; a peer already known keeps what the other way of
// learning of it said (manuallyAdded, trusted). A less trusted way never
// changes a peer known a more trusted way: an mDNS answer naming a
// handshaken or hand-added peer's node id cannot move it to another
// address.
func (p *peers) add(pi PeerInfo) (PeerInfo, bool, <-chan error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.m[pi.NodeID]
	if old == nil && len(p.m) >= maxPeers {
		ch := make(chan error, 1)
		ch <- &refusal{CodeInvalidRequest,
			fmt.Sprintf("this node knows %d peers, the most it keeps: remove one first", maxPeers)}
		return pi, false, ch
	}
	if old != nil && trust(*old) > trust(pi) {
		ch := make(chan error, 1)
		ch <- nil
		return *old, false, ch
	}
	if old != nil {
		pi.ManuallyAdded = pi.ManuallyAdded || old.ManuallyAdded
		pi.Trusted = pi.Trusted || old.Trusted
	}
	done := p.upsertLocked(&pi)
	return pi, old == nil, done
}

func (p *peers) remove(nodeID string) (bool, <-chan error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[nodeID] == nil {
		return false, nil
	}
	delete(p.m, nodeID)
	return true, p.commit(state.PeerDeleted(nodeID))
}

func (p *peers) list() []PeerInfo {
	p.mu.Lock()
	out := make([]PeerInfo, 0, len(p.m))
	for _, pi := range p.m {
		out = append(out, *pi)
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b PeerInfo) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

func (p *peers) get(nodeID string) (PeerInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.m[nodeID]
	if pi == nil {
		return PeerInfo{}, false
	}
	return *pi, true
}

// counts is /status's peers: total, online, offline.
func (p *peers) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := map[string]int{"total": len(p.m), "online": 0, "offline": 0}
	for _, pi := range p.m {
		if pi.Status == "online" || pi.Status == "offline" {
			c[pi.Status]++
		}
	}
	return c
}

// checked records a health check of nodeID: its new state, and whether
// its status changed.
func (p *peers) checked(nodeID string, ok bool, failuresToOffline int) (PeerInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.m[nodeID]
	if old == nil {
		return PeerInfo{}, false
	}
	pi := *old
	if ok {
		pi.Status, pi.FailureCount, pi.LastSeen = "online", 0, p.now().UnixMilli()
	} else {
		pi.FailureCount++
		if pi.FailureCount >= failuresToOffline {
			pi.Status = "offline"
		}
	}
	changed := pi.Status != old.Status
	if changed {
		p.upsertLocked(&pi) // the next check corrects a failed write
	} else {
		p.m[nodeID] = &pi
	}
	return pi, changed
}

// healthLoop asks every known peer's /health each interval until stop.
func (d *Domain) healthLoop(stop <-chan struct{}) {
	cfg := d.cfg
	client := &http.Client{Timeout: min(cfg.HealthInterval, 5*time.Second),
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	t := time.NewTicker(cfg.HealthInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop // the loop returns then too
		cancel()
	}()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, pi := range d.peers.list() {
			if pi.Address == "" || pi.Port == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok := probeHealth(ctx, client, pi, cfg.TLS)
				if np, changed := d.peers.checked(pi.NodeID, ok, cfg.HealthFailures); changed {
					d.emit(PeerStatusChanged{NodeID: np.NodeID, Address: np.Address, Port: np.Port, Status: np.Status, Failures: np.FailureCount})
				}
			}()
		}
		wg.Wait()
	}
}

// probeHealth asks pi's /health: over HTTPS first when this node serves
// TLS (its peers likely do too), then over HTTP, as Loopsy does.
func probeHealth(ctx context.Context, c *http.Client, pi PeerInfo, tls bool) bool {
	schemes := []string{"http"}
	if tls {
		schemes = []string{"https", "http"}
	}
	for _, scheme := range schemes {
		u := scheme + "://" + net.JoinHostPort(pi.Address, strconv.Itoa(pi.Port)) + "/api/v1/health"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false
		}
		resp, err := c.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
	}
	return false
}

// addManual records the peers the config names (Config.Manual) that are
// not known yet.
func (d *Domain) addManual() error {
	for _, m := range d.cfg.Manual {
		id := "manual-" + net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
		if _, ok := d.peers.get(id); ok {
			continue
		}
		pi, _, done := d.peers.add(PeerInfo{NodeID: id, Hostname: m.Host, Address: m.Host, Port: m.Port, Platform: "unknown",
			Version: "unknown", Status: "unknown", ManuallyAdded: true, Source: "config"})
		if err := <-done; err != nil {
			return fmt.Errorf("recording the configured peer %s: %w", net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), err)
		}
		d.emit(PeerAdded{NodeID: pi.NodeID, Address: pi.Address, Port: pi.Port, Source: "config"})
	}
	return nil
}

// majorVersion is the major number of a version such as "1.0.53".
func majorVersion(v string) (int, bool) {
	m, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	n, err := strconv.Atoi(m)
	return n, err == nil && n >= 0
}

// handshakeBody is Loopsy's HandshakeSchema.
type handshakeBody struct {
	NodeID       string   `json:"nodeId"`
	Hostname     string   `json:"hostname"`
	Platform     string   `json:"platform"`
	Version      string   `json:"version"`
	Port         int      `json:"port"`
	Capabilities []string `json:"capabilities"`
}

func (b handshakeBody) check() error {
	switch {
	case b.NodeID == "":
		return errors.New("nodeId is required")
	case len(b.NodeID) > 256:
		return errors.New("nodeId is at most 256 bytes")
	case b.Hostname == "":
		return errors.New("hostname is required")
	case b.Platform == "":
		return errors.New("platform is required")
	case b.Version == "":
		return errors.New("version is required")
	case b.Port < 1 || b.Port > 65535:
		return fmt.Errorf("port must be 1-65535, got %d", b.Port)
	case b.Capabilities == nil:
		return errors.New("capabilities is required (a list)")
	}
	return nil
}

// addPeerBody is a peer added by hand (POST /peers).
type addPeerBody struct {
	Address  string `json:"address"`
	Port     int    `json:"port"`
	NodeID   string `json:"nodeId"`
	Hostname string `json:"hostname"`
}

func (b *addPeerBody) check() error {
	if b.Port == 0 {
		b.Port = 19532
	}
	switch {
	case b.Address == "":
		return errors.New("address is required")
	case strings.ContainsAny(b.Address, "/ \t\r\n"):
		return fmt.Errorf("address must be a host name or IP address, got %q", b.Address)
	case b.Port < 1 || b.Port > 65535:
		return fmt.Errorf("port must be 1-65535, got %d", b.Port)
	case len(b.NodeID) > 256:
		return errors.New("nodeId is at most 256 bytes")
	}
	return nil
}
