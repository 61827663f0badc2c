package fleet

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/orchestrd/orchestrd/api"
)

// Each node of a fleet has an identity of its own (issue 37): an nkey
// (ed25519) whose public key the fleet's key certifies under the node's
// name. `orchestrd cluster init` makes the fleet's key (cluster.key, kept
// on the machine that makes nodes, never copied) and the first node's
// credentials; `orchestrd cluster add-node NAME` makes another node's.
// A node logs in to NATS with its nkey, and signs every record it writes
// to the fleet's buckets and every take: readers check who wrote what
// (ARCHITECTURE.md, "The fleet": "Who may write what").

// Formats of the files.
const (
	fleetKeyFormat  = "orchestrd-fleet-key/1"
	nodeCredsFormat = "orchestrd-node/1"
	// FleetKeyFile is the fleet's key, in the home of the node where
	// `cluster init` ran.
	FleetKeyFile = "cluster.key"
)

// fleetKeyFile is cluster.key: the fleet's key (an nkey account seed)
// and the secret the embedded servers' routes share.
type fleetKeyFile struct {
	Format        string `json:"format"`
	Seed          string `json:"seed"`
	RoutePassword string `json:"route_password"`
}

// nodeCreds is a node's cluster.creds.
type nodeCreds struct {
	Format string `json:"format"`
	Node   string `json:"node"`
	Seed   string `json:"seed"`  // the node's nkey seed (SU...)
	Fleet  string `json:"fleet"` // the fleet's public key (A...)
	Cert   string `json:"cert"`  // the fleet key's signature of certMsg
	// Lanes are the shared lanes the node may serve (take jobs of),
	// certified with its key; none: every lane.
	Lanes []string `json:"lanes,omitempty"`
	// RoutePassword: the embedded servers' routes (one for the fleet).
	RoutePassword string `json:"route_password"`
}

// routeUser is the user of the embedded servers' routes.
const routeUser = "orchestrd-route"

// certMsg is what the fleet's key signs to certify node's key, and the
// lanes it may serve (nil: every lane; then the message is the one
// certificates of before lanes were certified sign, which so stay valid
// and mean every lane).
func certMsg(fleet, node, key string, lanes []string) []byte {
	m := "orchestrd node certificate\nfleet " + fleet + "\nnode " + node + "\nkey " + key + "\n"
	if lanes != nil {
		m += "lanes " + strings.Join(lanes, ",") + "\n"
	}
	return []byte(m)
}

// ParseLanes reads a --lanes list: lane names separated by commas, each
// a shared lane's name ([A-Za-z0-9_-], at most 64), at least one;
// returned sorted, without repeats.
func ParseLanes(s string) ([]string, error) {
	var out []string
	for _, l := range strings.Split(s, ",") {
		l = strings.TrimSpace(l)
		if !validToken(l) {
			return nil, fmt.Errorf("lanes %q: %q is not a shared lane's name ([A-Za-z0-9_-], 1 to 64)", s, l)
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	if len(out) > maxNodeLanes {
		return nil, fmt.Errorf("lanes %q: more than %d lanes", s, maxNodeLanes)
	}
	slices.Sort(out)
	return out, nil
}

// mayServe says whether a certificate of lanes (nil: every lane) lets
// its node serve lane.
func mayServe(lanes []string, lane string) bool {
	return lanes == nil || slices.Contains(lanes, lane)
}

// identity is this node's: its name, key pair and certificate.
type identity struct {
	node  string
	kp    nkeys.KeyPair
	pub   string
	cert  string
	fleet string
	route string
	lanes []string // certified; nil: every lane
}

func (id *identity) sign(msg []byte) string {
	s, err := id.kp.Sign(msg)
	if err != nil {
		// An ed25519 key from a checked seed signs.
		panic(fmt.Sprintf("signing with this node's key: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(s)
}

// checkCert says whether cert certifies key as node in fleet, serving
// lanes (nil: every lane).
func checkCert(fleet, node, key, cert string, lanes []string) error {
	if !validName(node) {
		return errors.New("not a node name")
	}
	if !nkeys.IsValidPublicUserKey(key) {
		return errors.New("not a node's public key")
	}
	fk, err := nkeys.FromPublicKey(fleet)
	if err != nil {
		return fmt.Errorf("the fleet's key: %w", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(cert)
	if err != nil {
		return errors.New("the certificate is not base64")
	}
	if lanes != nil && (len(lanes) == 0 || !slices.IsSorted(lanes) || slices.ContainsFunc(lanes, func(l string) bool { return !validToken(l) })) {
		return errors.New("the certificate's lanes are not a sorted list of lane names")
	}
	if err := fk.Verify(certMsg(fleet, node, key, lanes), sig); err != nil {
		return errors.New("the certificate is not the fleet's")
	}
	return nil
}

// checkSig says whether sig is key's signature of msg.
func checkSig(key string, msg []byte, sig string) error {
	k, err := nkeys.FromPublicKey(key)
	if err != nil {
		return fmt.Errorf("the writer's key: %w", err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return errors.New("the signature is not base64")
	}
	if err := k.Verify(msg, raw); err != nil {
		return errors.New("the signature does not match")
	}
	return nil
}

// writeNew writes b to path, mode 0600; it refuses to replace a file
// unless force (then atomically).
func writeNew(path string, b []byte, force bool, what string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("writing %s: %s exists (give force to replace it)", what, path)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", what, err)
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			os.Remove(path)
			return fmt.Errorf("writing %s to %s: %w", what, path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("writing %s to %s: %w", what, path, err)
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".orchestrd-creds.*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", what, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

// InitFleet makes a fleet: its key (<home>/cluster.key) and the
// credentials of its first node, name (<home>/cluster.creds), both mode
// 0600. It refuses to replace either unless force (every node then needs
// new credentials). It returns the two paths.
// lanes are the shared lanes the node may serve (ParseLanes; nil: every
// lane).
func InitFleet(home, name string, lanes []string, force bool) (keyPath, credsPath string, err error) {
	if !validName(name) {
		return "", "", fmt.Errorf("making the fleet: node name %q: want 1 to %d of [A-Za-z0-9._-], not starting or ending with '.'", name, maxNameLen)
	}
	keyPath, credsPath = filepath.Join(home, FleetKeyFile), filepath.Join(home, CredentialsFile)
	if !force {
		for _, p := range []string{keyPath, credsPath} {
			if _, err := os.Lstat(p); err == nil {
				return "", "", fmt.Errorf("making the fleet: %s exists (give force to replace the fleet's key and this node's credentials: every node then needs new ones)", p)
			}
		}
	}
	kp, err := nkeys.CreateAccount()
	if err != nil {
		return "", "", fmt.Errorf("making the fleet's key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("making the fleet's key: %w", err)
	}
	fk := fleetKeyFile{Format: fleetKeyFormat, Seed: string(seed), RoutePassword: api.RandomHex(32)}
	b, err := json.Marshal(fk)
	if err != nil {
		return "", "", fmt.Errorf("encoding the fleet's key: %w", err)
	}
	if err := writeNew(keyPath, append(b, '\n'), force, "the fleet's key"); err != nil {
		return "", "", err
	}
	if _, err := writeNodeCreds(fk, name, lanes, credsPath, force); err != nil {
		return "", "", err
	}
	return keyPath, credsPath, nil
}

// AddNode makes node name's credentials with the fleet's key in home
// (made by InitFleet), written to out (mode 0600; refused if it exists
// unless force), certified to serve lanes (ParseLanes; nil: every lane).
// It returns the node's public key (an external NATS server lists it as a
// user: ARCHITECTURE.md, "The fleet").
func AddNode(home, name string, lanes []string, out string, force bool) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("adding node %q: want 1 to %d of [A-Za-z0-9._-], not starting or ending with '.'", name, maxNameLen)
	}
	fk, err := readFleetKey(filepath.Join(home, FleetKeyFile))
	if err != nil {
		return "", err
	}
	return writeNodeCreds(fk, name, lanes, out, force)
}

func readFleetKey(path string) (fleetKeyFile, error) {
	b, err := readPrivate(path, "the fleet's key")
	if err != nil {
		return fleetKeyFile{}, fmt.Errorf("%w (the fleet's key is made by `orchestrd cluster init`, in the home of the node where it ran)", err)
	}
	var fk fleetKeyFile
	if err := json.Unmarshal(b, &fk); err != nil || fk.Format != fleetKeyFormat || fk.RoutePassword == "" {
		return fleetKeyFile{}, fmt.Errorf("reading the fleet's key: %s is not a key made by `orchestrd cluster init`", path)
	}
	if _, err := nkeys.FromSeed([]byte(fk.Seed)); err != nil || !strings.HasPrefix(fk.Seed, "SA") {
		return fleetKeyFile{}, fmt.Errorf("reading the fleet's key: %s holds no account seed", path)
	}
	return fk, nil
}

func writeNodeCreds(fk fleetKeyFile, name string, lanes []string, path string, force bool) (string, error) {
	if lanes != nil {
		var err error
		if lanes, err = ParseLanes(strings.Join(lanes, ",")); err != nil {
			return "", fmt.Errorf("making node %s's credentials: %w", name, err)
		}
	}
	fkp, err := nkeys.FromSeed([]byte(fk.Seed))
	if err != nil {
		return "", fmt.Errorf("reading the fleet's key: %w", err)
	}
	fpub, err := fkp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("reading the fleet's key: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("making node %s's key: %w", name, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", fmt.Errorf("making node %s's key: %w", name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("making node %s's key: %w", name, err)
	}
	sig, err := fkp.Sign(certMsg(fpub, name, pub, lanes))
	if err != nil {
		return "", fmt.Errorf("certifying node %s's key: %w", name, err)
	}
	nc := nodeCreds{Format: nodeCredsFormat, Node: name, Seed: string(seed), Fleet: fpub,
		Cert: base64.RawURLEncoding.EncodeToString(sig), Lanes: lanes, RoutePassword: fk.RoutePassword}
	b, err := json.Marshal(nc)
	if err != nil {
		return "", fmt.Errorf("encoding node %s's credentials: %w", name, err)
	}
	if err := writeNew(path, append(b, '\n'), force, "node "+name+"'s credentials"); err != nil {
		return "", err
	}
	return pub, nil
}

// readPrivate reads a file that must not be readable by others; an
// error never carries its content.
func readPrivate(path, what string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("reading %s: %s is readable by others (mode %v): chmod 600 it", what, path, fi.Mode().Perm())
	}
	if fi.Size() > 64<<10 {
		return nil, fmt.Errorf("reading %s: %s is larger than 64 KiB", what, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return b, nil
}

// errOldCredentials: a cluster.creds of before issue 37.
const oldCredentialsHelp = "was made by an older `orchestrd cluster init`: one user and password for every node, " +
	"with which any node could write another's records. Give each node its own credentials: " +
	"`orchestrd cluster init --force` on one node, then `orchestrd cluster add-node NAME --out FILE` there for each other node, " +
	"and copy each FILE to its node's home as cluster.creds (mode 0600); every node needs its new file before it starts"

// readIdentity reads this node's credentials; name is the [cluster]
// name ("": the credentials' own). The error never holds the content.
func readIdentity(path, name string) (*identity, error) {
	b, err := readPrivate(path, "this node's fleet credentials")
	if err != nil {
		return nil, fmt.Errorf("%w (make them with `orchestrd cluster init` or `orchestrd cluster add-node`)", err)
	}
	var c nodeCreds
	if err := json.Unmarshal(b, &c); err != nil || c.Format != nodeCredsFormat {
		var old struct{ User, Password string }
		t := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &old) == nil && old.User != "" && old.Password != "" ||
			strings.HasPrefix(t, "-----BEGIN NATS USER JWT-----") || strings.HasPrefix(t, "SU") {
			return nil, fmt.Errorf("reading this node's fleet credentials: %s %s", path, oldCredentialsHelp)
		}
		return nil, fmt.Errorf("reading this node's fleet credentials: %s is not a node's credentials made by `orchestrd cluster init` or `orchestrd cluster add-node`", path)
	}
	if name != "" && c.Node != name {
		return nil, fmt.Errorf("reading this node's fleet credentials: %s are node %q's, and this node is %q ([cluster] name): make its own with `orchestrd cluster add-node %s`", path, c.Node, name, name)
	}
	kp, err := nkeys.FromSeed([]byte(c.Seed))
	if err != nil || !strings.HasPrefix(c.Seed, "SU") {
		return nil, fmt.Errorf("reading this node's fleet credentials: %s holds no node key", path)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("reading this node's fleet credentials: %w", err)
	}
	if err := checkCert(c.Fleet, c.Node, pub, c.Cert, c.Lanes); err != nil {
		return nil, fmt.Errorf("reading this node's fleet credentials: %s: %w", path, err)
	}
	if c.RoutePassword == "" {
		return nil, fmt.Errorf("reading this node's fleet credentials: %s has no route password", path)
	}
	return &identity{node: c.Node, kp: kp, pub: pub, cert: c.Cert, fleet: c.Fleet, route: c.RoutePassword, lanes: c.Lanes}, nil
}

// DefaultName is a node's name when [cluster] gives none: the hostname,
// its characters outside [A-Za-z0-9._-] made '-'.
func DefaultName() string {
	h, _ := os.Hostname()
	return sanitizeName(h)
}

// ClusterOf is the cluster the credentials at path belong to, as the
// ready line, status and cluster.nodes name it (ClusterID of the fleet's
// key).
func ClusterOf(path string) (string, error) {
	id, err := readIdentity(path, "")
	if err != nil {
		return "", err
	}
	return ClusterID(id.fleet), nil
}

// NodeKey is the public key of the node whose credentials are at path,
// and the lanes they let it serve (nil: every lane).
func NodeKey(path string) (string, []string, error) {
	id, err := readIdentity(path, "")
	if err != nil {
		return "", nil, err
	}
	return id.pub, id.lanes, nil
}
