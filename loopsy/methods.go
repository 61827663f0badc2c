package loopsy

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Register registers Loopsy's methods with mux. A request's body, as a
// Loopsy client sent it, is passed as it is in "body" (members it does not
// know are ignored, as Loopsy's server does); key_name is the name of the
// key the front-end admitted the request with (what the events say).
//
//   - loopsy.context.put {key, body: {value, ttl}, from}: the entry
//   - loopsy.context.get {key}: the entry (5001 when there is none)
//   - loopsy.context.delete {key}: {success, key}
//   - loopsy.context.list {prefix}: {entries}
//   - loopsy.peer.list: {peers}
//   - loopsy.peer.add {body: {address, port, nodeId, hostname}, key_name}: the peer
//   - loopsy.peer.handshake {body: HandshakeSchema, peer: its address, key_name}: {}
//   - loopsy.peer.remove {node_id, key_name}: {success, nodeId}
//   - loopsy.status: {peers: {total, online, offline}}
//
// A refusal is an api.Error whose Data is ErrorData (Loopsy's code).
func (d *Domain) Register(mux api.Mux) {
	for method, h := range map[string]func(api.Call){
		"loopsy.context.put": d.contextPut, "loopsy.context.get": d.contextGet, "loopsy.context.delete": d.contextDelete,
		"loopsy.context.list": d.contextList, "loopsy.peer.list": d.peerList, "loopsy.peer.add": d.peerAdd,
		"loopsy.peer.handshake": d.peerHandshake, "loopsy.peer.remove": d.peerRemove, "loopsy.status": d.statusMethod,
	} {
		mux.Handle(method, h)
	}
}

// decode decodes call's params into a P; false once it failed the call.
func decode[P any](call api.Call) (P, bool) {
	var p P
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return p, false
	}
	return p, true
}

// committed answers call once wait says the store has committed the
// change: with what answer gives, or the store's failure at what.
func (d *Domain) committed(call api.Call, wait func() error, what string, answer func() any) {
	go func() {
		if err := wait(); err != nil {
			d.fail(call, what, err)
			return
		}
		call.Respond(answer())
	}()
}

// recv is a wait on done.
func recv(done <-chan error) func() error { return func() error { return <-done } }

// The params of the methods.
type (
	contextParams struct {
		Key    string          `json:"key"`
		Body   json.RawMessage `json:"body,omitempty"`
		From   string          `json:"from,omitempty"`
		Prefix string          `json:"prefix,omitempty"`
	}
	peerParams struct {
		Body    json.RawMessage `json:"body,omitempty"`
		Peer    string          `json:"peer,omitempty"`
		NodeID  string          `json:"node_id,omitempty"`
		KeyName string          `json:"key_name,omitempty"`
	}
)

// contextSetBody is Loopsy's ContextSetSchema.
type contextSetBody struct {
	Value *string  `json:"value"`
	TTL   *float64 `json:"ttl"`
}

func (b contextSetBody) check() error {
	switch {
	case b.Value == nil:
		return errors.New("Missing value")
	case b.TTL != nil && !(*b.TTL > 0 && *b.TTL <= float64(math.MaxInt64/1e6)):
		return errors.New("ttl must be a positive number of seconds")
	}
	return nil
}

// decodeWithBody decodes call's params into p, then the request's body in
// them (*body) into b; false once it failed the call.
func (d *Domain) decodeWithBody(call api.Call, p any, body *json.RawMessage, b interface{ check() error }, prefix string) bool {
	if err := call.Decode(p); err != nil {
		call.Fail(err)
		return false
	}
	if err := decodeBody(*body, b, prefix); err != nil {
		d.fail(call, "", err)
		return false
	}
	return true
}

// decodeBody decodes a request's body into v, as Loopsy's server does:
// members it does not know are ignored. prefix starts the refusal's text.
func decodeBody(raw json.RawMessage, v interface{ check() error }, prefix string) error {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return &refusal{CodeInvalidRequest, "invalid JSON body: " + err.Error()}
	}
	if err := v.check(); err != nil {
		return &refusal{CodeInvalidRequest, prefix + err.Error()}
	}
	return nil
}

func (d *Domain) contextPut(call api.Call) {
	var p contextParams
	var b contextSetBody
	if !d.decodeWithBody(call, &p, &p.Body, &b, "") {
		return
	}
	from := cmp.Or(p.From, "local")
	doc, wait, err := d.ctx.put(p.Key, *b.Value, from, b.TTL)
	if err != nil {
		d.fail(call, "recording the context entry", err)
		return
	}
	d.committed(call, wait, "recording the context entry", func() any { return json.RawMessage(doc) })
}

// keyNotFound refuses a context key that has no entry.
func keyNotFound(key string) error {
	return &refusal{CodeContextNotFound, fmt.Sprintf("Key '%s' not found", key)}
}

func (d *Domain) contextGet(call api.Call) {
	if p, ok := decode[contextParams](call); ok {
		if e, found := d.ctx.get(p.Key); found {
			call.Respond(e)
		} else {
			d.fail(call, "", keyNotFound(p.Key))
		}
	}
}

func (d *Domain) contextDelete(call api.Call) {
	p, ok := decode[contextParams](call)
	if !ok {
		return
	}
	found, done := d.ctx.del(p.Key)
	if !found {
		d.fail(call, "", keyNotFound(p.Key))
		return
	}
	d.committed(call, recv(done), "removing the context entry", func() any { return map[string]any{"success": true, "key": p.Key} })
}

func (d *Domain) contextList(call api.Call) {
	p, ok := decode[contextParams](call)
	if !ok {
		return
	}
	call.Respond(map[string]any{"entries": d.ctx.list(p.Prefix)})
}

func (d *Domain) peerList(call api.Call) {
	if _, ok := decode[api.NoParams](call); !ok {
		return
	}
	call.Respond(map[string]any{"peers": d.peers.list()})
}

func (d *Domain) statusMethod(call api.Call) {
	if _, ok := decode[api.NoParams](call); !ok {
		return
	}
	call.Respond(map[string]any{"peers": d.peers.counts()})
}

// added answers a peer's add once the store has committed it, telling of
// a peer new to the registry.
func (d *Domain) added(call api.Call, pi PeerInfo, added bool, done <-chan error, source, keyName string, answer any) {
	d.committed(call, recv(done), "recording the peer", func() any {
		if added {
			d.emit(PeerAdded{NodeID: pi.NodeID, Address: pi.Address, Port: pi.Port, Source: source, KeyName: keyName})
		}
		if answer == nil {
			return pi
		}
		return answer
	})
}

func (d *Domain) peerAdd(call api.Call) {
	var p peerParams
	var b addPeerBody
	if !d.decodeWithBody(call, &p, &p.Body, &b, "") {
		return
	}
	id := cmp.Or(b.NodeID, "manual-"+net.JoinHostPort(b.Address, fmt.Sprint(b.Port)))
	host := cmp.Or(b.Hostname, b.Address)
	pi, added, done := d.peers.add(PeerInfo{NodeID: id, Hostname: host, Address: b.Address, Port: b.Port, Platform: "unknown",
		Version: "unknown", Status: "unknown", ManuallyAdded: true, Source: "manual"})
	d.added(call, pi, added, done, "manual", p.KeyName, nil)
}

func (d *Domain) peerHandshake(call api.Call) {
	var p peerParams
	var b handshakeBody
	if !d.decodeWithBody(call, &p, &p.Body, &b, "invalid handshake: ") {
		return
	}
	ours, _ := majorVersion(d.cfg.ProtocolVersion)
	if theirs, ok := majorVersion(b.Version); !ok || theirs != ours {
		d.emit(PeerHandshakeRefused{NodeID: b.NodeID, Peer: p.Peer, Version: b.Version, Reason: "version_mismatch"})
		d.fail(call, "", &refusal{CodePeerVersionMismatch,
			fmt.Sprintf("protocol version %q is not compatible with this node's %s (the major versions differ)", b.Version, d.cfg.ProtocolVersion)})
		return
	}
	addr, _, err := net.SplitHostPort(p.Peer)
	if err != nil {
		addr = p.Peer
	}
	pi, added, done := d.peers.add(PeerInfo{NodeID: b.NodeID, Hostname: b.Hostname, Address: addr, Port: b.Port,
		Platform: b.Platform, Version: b.Version, Capabilities: b.Capabilities, Status: "online", LastSeen: time.Now().UnixMilli(),
		Source: "handshake"})
	d.added(call, pi, added, done, "handshake", p.KeyName, struct{}{})
}

func (d *Domain) peerRemove(call api.Call) {
	p, ok := decode[peerParams](call)
	if !ok {
		return
	}
	found, done := d.peers.remove(p.NodeID)
	if !found {
		d.fail(call, "", &refusal{CodePeerNotFound, fmt.Sprintf("Peer %s not found", p.NodeID)})
		return
	}
	d.committed(call, recv(done), "removing the peer", func() any {
		d.emit(PeerRemoved{NodeID: p.NodeID, KeyName: p.KeyName})
		return map[string]any{"success": true, "nodeId": p.NodeID}
	})
}
