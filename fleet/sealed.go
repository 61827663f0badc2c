package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Who may write what (issue 37). Every value a node writes to the jobs
// and nodes buckets, and every take claim, is sealed: the value, the
// writer's name, its public key, the fleet's certificate of that key and
// the writer's signature of the bucket, the key, its name and the value.
// A reader opens it (the certificate must be the fleet's, the signature
// the writer's) and then applies the rule of the bucket:
//   - a node's key: written by the node itself, or a declaration that it
//     is lost whose lost_by is the writer;
//   - a job's record with a taker (node): written by the taker, or a
//     node_lost failure (any node: the fleet's lost detection), and the
//     job's take claim, once there is one, names that taker and
//     incarnation; a terminal record of a taker needs its claim;
//   - a job's record without a taker (queued, cancelled or not queued
//     before any take): any node of the fleet.
// A value that fails is refused: cluster.record_refused, and readers
// treat it as not there (a waiter waits on; the taker writes its own
// record over it).

const (
	takesStream  = "ORCHESTRD_TAKES"
	takeSubjPfx  = "orchestrd.take."
	sealJobs     = "jobs"
	sealNodes    = "nodes"
	sealTakes    = "takes"
	maxSealedVal = maxJobValue + 4<<10 // the envelope's own few hundred bytes
)

// sealed is the envelope of a value a node wrote.
type sealed struct {
	V    json.RawMessage `json:"v"`
	By   string          `json:"by"`
	Key  string          `json:"key"`
	Cert string          `json:"cert"`
	// Lanes: the lanes the certificate lets the writer serve (none:
	// every lane).
	Lanes []string `json:"lanes,omitempty"`
	Sig   string   `json:"sig"`
}

// writer is who sealed a value: a node of the fleet, its key and the
// lanes its certificate lets it serve (nil: every lane).
type writer struct {
	name  string
	key   string
	lanes []string
}

func sealMsg(bucket, key, by string, v []byte) []byte {
	b := make([]byte, 0, len(v)+len(bucket)+len(key)+len(by)+32)
	b = append(b, "orchestrd record\n"...)
	b = append(b, bucket...)
	b = append(b, '\n')
	b = append(b, key...)
	b = append(b, '\n')
	b = append(b, by...)
	b = append(b, '\n')
	return append(b, v...)
}

// seal wraps v, written under key of bucket by this node.
func (id *identity) seal(bucket, key string, v []byte) ([]byte, error) {
	b, err := json.Marshal(sealed{V: v, By: id.node, Key: id.pub, Cert: id.cert, Lanes: id.lanes, Sig: id.sign(sealMsg(bucket, key, id.node, v))})
	if err != nil {
		return nil, fmt.Errorf("sealing %s %s: %w", bucket, key, err)
	}
	return b, nil
}

// refusedError: a value whose writer is not the fleet's node it names, or
// a node the rule does not let write it.
type refusedError struct {
	bucket, key, by, why string
	rev                  uint64
}

func (e *refusedError) Error() string {
	by := e.by
	if by == "" {
		by = "an unknown writer"
	}
	return fmt.Sprintf("%s %s: refused the value written by %s: %s", e.bucket, e.key, by, e.why)
}

func isRefused(err error) (*refusedError, bool) {
	var re *refusedError
	return re, errors.As(err, &re)
}

// certs remembers the certificates checked (writer|key|cert|lanes), at
// most maxCerts.
type certs struct {
	mu sync.Mutex
	ok map[string]bool
}

const maxCerts = 1024

// open checks the envelope of key's value in bucket: written by a node
// of fleet. It returns the value and its writer.
func (c *certs) open(fleet, bucket, key string, b []byte) ([]byte, writer, error) {
	refuse := func(by, why string) ([]byte, writer, error) {
		return nil, writer{}, &refusedError{bucket: bucket, key: key, by: by, why: why}
	}
	if len(b) > maxSealedVal {
		return refuse("", fmt.Sprintf("a value of %d bytes", len(b)))
	}
	var s sealed
	if err := json.Unmarshal(b, &s); err != nil || s.Sig == "" || len(s.V) == 0 {
		return refuse("", "not sealed by a node of the fleet (a node of an earlier version, or a forgery)")
	}
	if !validName(s.By) {
		return refuse("", "the writer is not a node name")
	}
	if err := c.check(fleet, s.By, s.Key, s.Cert, s.Lanes); err != nil {
		return refuse("", "the writer's certificate: "+err.Error())
	}
	if err := checkSig(s.Key, sealMsg(bucket, key, s.By, s.V), s.Sig); err != nil {
		return refuse(s.By, err.Error())
	}
	return s.V, writer{name: s.By, key: s.Key, lanes: s.Lanes}, nil
}

// check is checkCert, remembered.
func (c *certs) check(fleet, by, key, cert string, lanes []string) error {
	ck := by + "|" + key + "|" + cert + "|" + strings.Join(lanes, ",")
	if lanes == nil {
		ck += "|*"
	}
	c.mu.Lock()
	known := c.ok[ck]
	c.mu.Unlock()
	if !known {
		if err := checkCert(fleet, by, key, cert, lanes); err != nil {
			return err
		}
		c.mu.Lock()
		if c.ok == nil || len(c.ok) >= maxCerts {
			c.ok = map[string]bool{}
		}
		c.ok[ck] = true
		c.mu.Unlock()
	}
	return nil
}

// readNode opens and decodes key's value in the nodes bucket and
// applies its rule.
func (f *Fleet) readNode(key string, b []byte) (nodeInfo, error) {
	return readSealed(f, sealNodes, key, b, decodeNode, nodeWriterOK)
}

// readSealed opens key's value b in bucket, decodes it with decode and
// applies the bucket's rule of who may write it (ok): a value its rule
// refuses is a *refusedError.
func readSealed[T any](f *Fleet, bucket, key string, b []byte, decode func(key string, b []byte) (T, error),
	ok func(T, writer) error) (T, error) {
	var zero T
	v, w, err := f.certs.open(f.id.fleet, bucket, key, b)
	if err != nil {
		return zero, err
	}
	t, err := decode(key, v)
	if err != nil {
		return zero, err
	}
	if err := ok(t, w); err != nil {
		return zero, &refusedError{bucket: bucket, key: key, by: w.name, why: err.Error()}
	}
	return t, nil
}

// nodeWriterOK: a node's key is written by the node, serving only lanes
// its certificate lists, or declared lost by its writer.
func nodeWriterOK(n nodeInfo, w writer) error {
	if n.State == nodeLost && n.LostBy == w.name {
		return nil
	}
	if w.name != n.Name {
		return fmt.Errorf("node %s's heartbeat, written by another node", n.Name)
	}
	for _, l := range n.Lanes {
		if !mayServe(w.lanes, l) {
			return fmt.Errorf("node %s's heartbeat serves lane %s, which its certificate does not list", n.Name, l)
		}
	}
	return nil
}

// readJob opens and decodes key's value in the jobs bucket and applies
// its rule but the take claim's (checkClaim).
func (f *Fleet) readJob(key string, b []byte) (jobEntry, error) {
	return readSealed(f, sealJobs, key, b, decodeJob, jobWriterOK)
}

// nodeLostFailure: the record a node declaring another lost writes.
func nodeLostFailure(e jobEntry) bool {
	return e.Record.State == api.StateFailed && e.Record.Error == api.ErrNodeLost
}

// jobWriterOK: a record's lane is the lane its id was made for; a record
// with a taker is the taker's, whose certificate lists the lane, or a
// node_lost failure; one without is any node's.
func jobWriterOK(e jobEntry, w writer) error {
	r := e.Record
	if !idLaneOK(r.ID, r.Lane) {
		return fmt.Errorf("a record of lane %s of a job submitted to another lane", r.Lane)
	}
	switch {
	case r.Node == "" || nodeLostFailure(e):
		return nil
	case r.Node != w.name:
		return fmt.Errorf("a record of a job taken by %s, written by another node", r.Node)
	case !mayServe(w.lanes, r.Lane):
		return fmt.Errorf("a take of a job of lane %s by %s, whose certificate does not list the lane", r.Lane, w.name)
	}
	return nil
}

// takeClaim is a job's take, written once (the takes stream keeps one
// message per job and refuses a second: DiscardNewPerSubject). Remembered
// with its writer's key and lanes (the key checks the job's output).
type takeClaim struct {
	ID          string `json:"id"`
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`

	key   nkeys.KeyPair // the taker's public key
	lanes []string      // the lanes its certificate lists (nil: every lane)
}

// claims remembers the take claims read (they never change), at most
// maxClaims.
type claims struct {
	mu sync.Mutex
	m  map[string]takeClaim
}

const maxClaims = 8192

// readClaim reads job id's take claim; found false: none.
func (f *Fleet) readClaim(ctx context.Context, id string) (takeClaim, bool, error) {
	f.claims.mu.Lock()
	c, ok := f.claims.m[id]
	f.claims.mu.Unlock()
	if ok {
		return c, true, nil
	}
	var m *jetstream.RawStreamMsg
	err := again(ctx, func(ctx context.Context, _ int) error {
		var err error
		m, err = f.takes.GetLastMsgForSubject(ctx, takeSubjPfx+id)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return takeClaim{}, false, nil
	}
	if err != nil {
		return takeClaim{}, false, fmt.Errorf("reading job %s's take: %w", id, err)
	}
	v, w, err := f.certs.open(f.id.fleet, sealTakes, id, m.Data)
	if err != nil {
		return takeClaim{}, false, err
	}
	if err := json.Unmarshal(v, &c); err != nil || c.ID != id || c.Node != w.name || !validName(c.Node) || c.Incarnation == "" || len(c.Incarnation) > 64 {
		return takeClaim{}, false, &refusedError{bucket: sealTakes, key: id, by: w.name, why: "a take claim that is not its writer's take of the job"}
	}
	if c.key, err = nkeys.FromPublicKey(w.key); err != nil {
		return takeClaim{}, false, &refusedError{bucket: sealTakes, key: id, by: w.name, why: "the writer's key: " + err.Error()}
	}
	c.lanes = w.lanes
	f.claims.mu.Lock()
	if f.claims.m == nil || len(f.claims.m) >= maxClaims {
		f.claims.m = map[string]takeClaim{}
	}
	f.claims.m[id] = c
	f.claims.mu.Unlock()
	return c, true, nil
}

// checkClaim: a record with a taker names the job's take claim's node and
// incarnation, whose certificate lists the job's lane (a node_lost
// failure excepted); a terminal one needs the claim. One without a taker
// needs none. A claim refused is told, and is no claim.
func (f *Fleet) checkClaim(ctx context.Context, e jobEntry) error {
	r := e.Record
	if r.Node == "" || nodeLostFailure(e) {
		return nil
	}
	c, found, err := f.readClaim(ctx, r.ID)
	if re, ok := isRefused(err); ok {
		f.refused(re)
		found, err = false, nil
	}
	if err != nil {
		return err
	}
	if found && !mayServe(c.lanes, r.Lane) {
		f.refused(&refusedError{bucket: sealTakes, key: r.ID, by: c.Node, why: "a take of a job of lane " + eventlog.Ident(r.Lane) + " by " + eventlog.Ident(c.Node) + ", whose certificate does not list the lane"})
		found = false
	}
	switch {
	case !found && r.State.Terminal() && !(r.State == api.StateError && strings.HasPrefix(r.Error, "not_run")):
		return &refusedError{bucket: sealJobs, key: r.ID, by: r.Node, why: "an end of a job nobody claimed to take"}
	case found && (c.Node != r.Node || c.Incarnation != e.Incarnation):
		return &refusedError{bucket: sealJobs, key: r.ID, by: r.Node, why: "a record of a job taken by " + eventlog.Ident(c.Node) + ", naming " + eventlog.Ident(r.Node)}
	}
	return nil
}

// claimTake writes this node's take claim of job id; an earlier try of
// its own found there is this node's claim. Another node's claim there
// is an error naming it.
func (f *Fleet) claimTake(ctx context.Context, id string) error {
	v, err := json.Marshal(takeClaim{ID: id, Node: f.name, Incarnation: f.inc})
	if err != nil {
		return fmt.Errorf("encoding job %s's take: %w", id, err)
	}
	b, err := f.id.seal(sealTakes, id, v)
	if err != nil {
		return err
	}
	err = again(ctx, func(ctx context.Context, _ int) error {
		_, err := f.js.Publish(ctx, takeSubjPfx+id, b)
		return err
	})
	if err == nil {
		return nil
	}
	c, found, rerr := f.readClaim(ctx, id)
	switch {
	case rerr != nil:
		return fmt.Errorf("claiming job %s's take: %w (reading the claim: %v)", id, err, rerr)
	case found && c.Node == f.name && c.Incarnation == f.inc:
		return nil
	case found:
		return &refusedError{bucket: sealTakes, key: id, by: c.Node, why: "the job's take was claimed by " + eventlog.Ident(c.Node)}
	}
	return fmt.Errorf("claiming job %s's take: %w", id, err)
}

// refused tells a refused value once per key and writer: a warning and
// cluster.record_refused.
func (f *Fleet) refused(re *refusedError) {
	if !f.firstRefusal(re.bucket + "|" + re.key + "|" + re.by + "|" + re.why) {
		return
	}
	f.log.Warn().Str("bucket", re.bucket).Str("key", eventlog.Ident(re.key)).Str("writer", eventlog.Ident(re.by)).Str("why", re.why).Msg("refused a fleet record not written by who may write it")
	f.emit(ClusterRecordRefused{What: re.bucket, Key: eventlog.Ident(re.key), Writer: eventlog.Ident(re.by), Why: re.why})
}

// firstRefusal reports whether refusal k (its kind, key, writer and
// reason) is told for the first time; the set is bounded (cleared at 4096).
func (f *Fleet) firstRefusal(k string) bool {
	f.refMu.Lock()
	defer f.refMu.Unlock()
	if f.refusedSeen == nil || len(f.refusedSeen) >= 4096 {
		f.refusedSeen = map[string]bool{}
	}
	if f.refusedSeen[k] {
		return false
	}
	f.refusedSeen[k] = true
	return true
}

// sealJob is e's value in the jobs bucket, sealed by this node.
func (f *Fleet) sealJob(e jobEntry) ([]byte, error) {
	e.Record.Output = ""
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding cluster job %s: %w", e.Record.ID, err)
	}
	return f.id.seal(sealJobs, e.Record.ID, b)
}

// sealNode is n's value in the nodes bucket, sealed by this node.
func (f *Fleet) sealNode(n nodeInfo) ([]byte, error) {
	b, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("encoding node %s: %w", n.Name, err)
	}
	return f.id.seal(sealNodes, n.Name, b)
}
