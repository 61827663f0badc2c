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

// loginToken is "orchestrd1:<node>:<cert>".
func (id *identity) loginToken() string { return tokenPrefix + id.node + ":" + id.cert }

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
	if !ok || checkCert(a.fleet, node, o.Nkey, cert) != nil {
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
	c.RegisterUser(&server.User{Username: node, Permissions: nodePermissions(node)})
	return true
}

// nodePermissions are what node's client may publish and subscribe to.
// Per node: its events subject, its cancel subject. The buckets' keys
// are the bucket's (a lost node's key is written by who declares it, a
// job's record by its submitter, its taker and who cancels it or
// declares its taker lost): who may write which value is the readers'
// rule, on the values' seals (sealed.go). Deleting the fleet's streams,
// purging or deleting from the buckets and the take claims, and changing
// the claims' stream are denied.
func nodePermissions(node string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{"$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>",
				"$KV." + jobsBucket + ".>", "$KV." + nodesBucket + ".>",
				laneSubjPfx + ">", outSubjPfx + ">", inSubjPfx + ">", inTakenPfx + ">", takeSubjPfx + ">",
				nodeSubjPfx + "*.cancel", eventsSubjPfx + node},
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
// (authorization { users = [ ... ] }): its nkey pub and its permissions.
func NATSUser(node, pub string) string {
	p := nodePermissions(node)
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
