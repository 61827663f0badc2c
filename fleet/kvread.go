package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvRecord is a key's last value in a bucket, and its revision (the
// stream sequence a CAS names).
type kvRecord struct {
	value []byte
	rev   uint64
}

// readKey reads key's last record in bucket through the bucket stream's
// leader ($JS.API.STREAM.MSG.GET) whatever the bucket's KeyValue handle
// would do. The fleet's buckets have direct gets off (bucket: a replica
// behind the leader would answer one), but a handle decides once, from
// the stream info it was bound with, whether its Get is a direct get: one
// bound from an info that still said direct (read before the node that
// made the bucket turned them off, or answered from an old state) sends
// direct gets, which a current server no longer answers ("no
// responders", for ever) and Debian's nats-server 2.9.10 answers from a
// replica, however far behind. With readKey every node reads the same
// way. (TestFleetExternalNATS's node whose first heartbeat could not read
// its own record for minutes, on 2.9.10, while the others joined, may
// have met that difference; it was not seen again to say.)
//
// The fleet's reads are few (a join, a heartbeat whose CAS lost, a lost
// node's check, a cluster job's read): its leader answers them all. A
// missing key, or one whose last record is a delete or purge marker, is
// jetstream.ErrKeyNotFound, as KeyValue.Get says it.
func (f *Fleet) readKey(ctx context.Context, bucket, key string) (kvRecord, error) {
	if !validKey(key) {
		return kvRecord{}, jetstream.ErrInvalidKey
	}
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{"$KV." + bucket + "." + key})
	if err != nil {
		return kvRecord{}, err
	}
	m, err := f.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return kvRecord{}, err
	}
	return decodeMsgGet(m.Data)
}

// decodeMsgGet decodes a STREAM.MSG.GET answer of a bucket's key.
func decodeMsgGet(b []byte) (kvRecord, error) {
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return kvRecord{}, fmt.Errorf("decoding JetStream's answer: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return kvRecord{}, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return kvRecord{}, resp.Error
	case resp.Message == nil:
		return kvRecord{}, jetstream.ErrInvalidJetStreamResponse
	}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return kvRecord{}, fmt.Errorf("decoding a record's headers: %w", err)
		}
		// A delete or purge marker (KV-Operation), or a marker the server
		// left for a record it removed (Nats-Marker-Reason).
		switch op, why := h.Get("KV-Operation"), h.Get(jetstream.MarkerReasonHeader); {
		case op == "DEL" || op == "PURGE", op == "" && (why == "MaxAge" || why == "Purge" || why == "Remove"):
			return kvRecord{}, jetstream.ErrKeyNotFound
		}
	}
	return kvRecord{value: resp.Message.Data, rev: resp.Message.Seq}, nil
}

// validKey is nats.go's rule for a key (KeyValue.Get's): letters, digits
// and - / _ = ., no empty token. It keeps a wildcard out of the subject
// read: "*" or ">" would read another key's record.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-/_=.", r):
		default:
			return false
		}
	}
	return true
}
