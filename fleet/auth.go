package fleet

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// A node's login to NATS (issue 37): its nkey signs the server's nonce,
// and the token carries its name and certificate. An embedded server
// admits any node the fleet's key certified (nodeAuth), each with the
// permissions of its name (nodePermissions); an external server lists
// each node's nkey as a user with the same permissions (NATSUser, which
// `orchestrd cluster add-node` prints) and ignores the token.

const tokenPrefix = "orchestrd1:"

// loginToken is "orchestrd1:<node>:<cert>", then ":<lanes>" (comma
// separated) when the certificate lists lanes.
func (id *identity) loginToken() string {
	t := tokenPrefix + id.node + ":" + id.cert
	if id.lanes != nil {
		t += ":" + strings.Join(id.lanes, ",")
	}
	return t
}

// nodeAuth is the embedded server's check of a client: a node of the
// fleet, by its nkey, the nonce's signature and its certificate.
type nodeAuth struct{ fleet string }

func (a nodeAuth) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	rest, ok := strings.CutPrefix(o.Token, tokenPrefix)
	if !ok {
		return false
	}
	node, cert, ok := strings.Cut(rest, ":")
	if !ok {
		return false
	}
	var lanes []string
	if c, l, has := strings.Cut(cert, ":"); has {
		cert, lanes = c, strings.Split(l, ",")
	}
	if checkCert(a.fleet, node, o.Nkey, cert, lanes) != nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(o.Sig)
	if err != nil {
		if sig, err = base64.StdEncoding.DecodeString(o.Sig); err != nil {
			return false
		}
	}
	k, err := nkeys.FromPublicKey(o.Nkey)
	if err != nil || k.Verify(c.GetNonce(), sig) != nil {
		return false
	}
	c.RegisterUser(&server.User{Username: node, Permissions: nodePermissions(node, lanes)})
	return true
}

// nodePermissions are what node's client may publish and subscribe to.
// Per node: its events subject, its cancel subject, its output subjects
// (orchestrd.out.<job>.<node>), and, when its certificate lists lanes
// (nil: every lane), the pulls of those lanes' queues only. The
// buckets' keys are the bucket's (a lost node's key is written by who
// declares it, a job's record by its submitter, its taker and who
// cancels it or declares its taker lost): who may write which value is
// the readers' rule, on the values' seals (sealed.go). Deleting the
// fleet's streams, purging or deleting from the buckets and the take
// claims, and changing the claims' stream are denied.
func nodePermissions(node string, lanes []string) *server.Permissions {
	jsAPI := []string{"$JS.API.>"}
	if lanes != nil {
		// A deny cannot be lifted by an allow, and subjects cannot name
		// "every lane but these": the JetStream API is allowed but the
		// pulls of consumers (CONSUMER.MSG.NEXT), which are allowed on
		// the fleet's own streams and on the listed lanes' queues only.
		jsAPI = []string{"$JS.API.INFO", "$JS.API.STREAM.>", "$JS.API.DIRECT.GET.>",
			"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>", "$JS.API.CONSUMER.INFO.>",
			"$JS.API.CONSUMER.DELETE.>", "$JS.API.CONSUMER.NAMES.>", "$JS.API.CONSUMER.LIST.>"}
		for _, s := range []string{"KV_" + jobsBucket, "KV_" + nodesBucket, outputStream, inputStream, eventsStream, takesStream} {
			jsAPI = append(jsAPI, "$JS.API.CONSUMER.MSG.NEXT."+s+".>")
		}
		for _, l := range lanes {
			jsAPI = append(jsAPI, "$JS.API.CONSUMER.MSG.NEXT."+laneStreamPfx+l+"."+workers)
		}
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: append(jsAPI, "$JS.ACK.>", "$JS.FC.>", "_INBOX.>",
				"$KV."+jobsBucket+".>", "$KV."+nodesBucket+".>",
				laneSubjPfx+">", outSubjPfx+"*."+node, inSubjPfx+">", inTakenPfx+">", takeSubjPfx+">",
				nodeSubjPfx+"*.cancel", eventsSubjPfx+node),
			Deny: []string{"$JS.API.STREAM.DELETE.>",
				"$JS.API.STREAM.PURGE." + takesStream, "$JS.API.STREAM.MSG.DELETE." + takesStream, "$JS.API.STREAM.UPDATE." + takesStream,
				"$JS.API.STREAM.PURGE.KV_" + jobsBucket, "$JS.API.STREAM.MSG.DELETE.KV_" + jobsBucket,
				"$JS.API.STREAM.PURGE.KV_" + nodesBucket, "$JS.API.STREAM.MSG.DELETE.KV_" + nodesBucket,
				"$JS.API.STREAM.PURGE." + eventsStream, "$JS.API.STREAM.MSG.DELETE." + eventsStream,
				"$JS.API.STREAM.PURGE." + outputStream, "$JS.API.STREAM.MSG.DELETE." + outputStream},
		},
		Subscribe: &server.SubjectPermission{
			Allow: []string{"_INBOX.>", nodeSubjPfx + node + ".cancel", outSubjPfx + ">", inSubjPfx + ">", inTakenPfx + ">"},
		},
	}
}

// NATSUser is node's user in an external nats-server's configuration
// (authorization { users = [ ... ] }): its nkey pub and its permissions,
// those of a node whose certificate lists lanes (nil: every lane).
func NATSUser(node, pub string, lanes []string) string {
	p := nodePermissions(node, lanes)
	list := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprintf("{ nkey: %q, permissions: { publish: { allow: %s, deny: %s }, subscribe: { allow: %s } } }",
		pub, list(p.Publish.Allow), list(p.Publish.Deny), list(p.Subscribe.Allow))
}
