package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/daemon/httpapi"
	loopsy "github.com/orchestrd/orchestrd/daemon/httpapi/client"

	"github.com/orchestrd/orchestrd/api"
)

const peersUsage = `orchestrd peers [--home DIR] [--json]
orchestrd peers add ADDRESS[:PORT] [--node-id ID]
orchestrd peers rm NODE_ID

Lists, adds or forgets the Loopsy peers this daemon knows (through its own
HTTP API): node id, address, host name, and whether its last health checks
found it online. A peer runs jobs for you with: orchestrd run --peer NAME -- CMD...`

// localAPI is a client of this home's daemon's HTTP API: its address from
// the control socket (http.info), its key from HOME/http.key.
func localAPI(home string) (*loopsy.Client, error) {
	c, err := dialHome(home)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var info struct {
		Addr string `json:"addr"`
		TLS  bool   `json:"tls"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := c.Call(ctx, "http.info", nil, &info); err != nil {
		return nil, fmt.Errorf("asking the daemon where its HTTP API is: %w", err)
	}
	host, port, err := net.SplitHostPort(info.Addr)
	if err != nil {
		return nil, fmt.Errorf("the daemon's HTTP address %q: %w", info.Addr, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	key, err := ownKey(home)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if info.TLS {
		scheme = "https"
	}
	return loopsy.New(scheme+"://"+net.JoinHostPort(host, port)+"/api/v1", key, true), nil
}

func cmdPeers(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("peers")
	home := homeFlag(fs)
	asJSON := fs.Bool("json", false, "print the peers as JSON")
	nodeID := fs.String("node-id", "", "peers add: the peer's node `ID` (default manual-ADDRESS:PORT)")
	pos, code, ok := parseInterspersed(fs, peersUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	api, err := localAPI(resolveHome(*home))
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd peers: %v\n", err)
		return exitFailure
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	switch {
	case len(pos) == 0 || (len(pos) == 1 && pos[0] == "list"):
		peers, err := api.Peers(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd peers: %v\n", err)
			return exitFailure
		}
		return printTable(stdout, stderr, *asJSON, "peers", peers, listCut{}, "no peers (add one: orchestrd peers add ADDRESS[:PORT])",
			"NODE ID\tADDRESS\tHOST\tSTATUS\tLAST SEEN\tVERSION", func(w io.Writer, p loopsy.Peer) {
				seen := "never"
				if p.LastSeen > 0 {
					seen = time.Since(time.UnixMilli(p.LastSeen)).Round(time.Second).String() + " ago"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.NodeID, net.JoinHostPort(p.Address, strconv.Itoa(p.Port)), p.Hostname, p.Status, seen, p.Version)
			})
	case len(pos) == 2 && pos[0] == "add":
		host, port, err := httpapi.SplitPeerAddr(pos[1])
		if err != nil {
			return usageError(fs, peersUsage, stderr, "%v", err)
		}
		p, err := api.AddPeer(ctx, host, port, *nodeID)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd peers add: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "added %s (%s)\n", p.NodeID, net.JoinHostPort(p.Address, strconv.Itoa(p.Port)))
		return exitOK
	case len(pos) == 2 && (pos[0] == "rm" || pos[0] == "remove"):
		if err := api.RemovePeer(ctx, pos[1]); err != nil {
			fmt.Fprintf(stderr, "orchestrd peers rm: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "removed %s\n", pos[1])
		return exitOK
	}
	return usageError(fs, peersUsage, stderr, "want: peers [list], peers add ADDRESS[:PORT], or peers rm NODE_ID")
}

// peerTarget finds where NAME's API is: a URL as given; else a known peer
// by node id, host name, node id prefix, or address[:port]; else, when
// NAME is ADDRESS:PORT, that address. The peer is returned when NAME named
// a known one.
func peerTarget(home, name string) (string, *loopsy.Peer, error) {
	if strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://") {
		base := strings.TrimSuffix(name, "/")
		if !strings.HasSuffix(base, "/api/v1") {
			base += "/api/v1"
		}
		return base, nil, nil
	}
	base := func(p loopsy.Peer) string {
		return "http://" + net.JoinHostPort(p.Address, strconv.Itoa(p.Port)) + "/api/v1"
	}
	local, lerr := localAPI(home)
	var peers []loopsy.Peer
	if lerr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		peers, lerr = local.Peers(ctx)
		cancel()
	}
	// Where two peers match alike (a host name mDNS announced and one you
	// added), the one you added wins.
	slices.SortStableFunc(peers, func(a, b loopsy.Peer) int { return peerTrust(b) - peerTrust(a) })
	for _, match := range []func(p loopsy.Peer) bool{
		func(p loopsy.Peer) bool { return p.NodeID == name },
		func(p loopsy.Peer) bool { return p.Hostname == name },
		func(p loopsy.Peer) bool {
			return net.JoinHostPort(p.Address, strconv.Itoa(p.Port)) == name || p.Address == name
		},
	} {
		for _, p := range peers {
			if match(p) {
				return base(p), &p, nil
			}
		}
	}
	var prefixed []loopsy.Peer
	for _, p := range peers {
		if strings.HasPrefix(p.NodeID, name) {
			prefixed = append(prefixed, p)
		}
	}
	if len(prefixed) == 1 {
		return base(prefixed[0]), &prefixed[0], nil
	}
	if host, port, err := net.SplitHostPort(name); err == nil {
		return "http://" + net.JoinHostPort(host, port) + "/api/v1", nil, nil
	}
	switch {
	case len(prefixed) > 1:
		return "", nil, fmt.Errorf("%q names %s; give more of the node id", name, api.Count(len(prefixed), "peer"))
	case lerr != nil:
		return "", nil, fmt.Errorf("no peer %q: the local daemon's peers could not be read (%v); give ADDRESS:PORT or a URL", name, lerr)
	}
	known := make([]string, 0, len(peers))
	for _, p := range peers {
		known = append(known, p.NodeID+" ("+p.Hostname+")")
	}
	if len(known) == 0 {
		return "", nil, fmt.Errorf("no peer %q: this daemon knows no peers (orchestrd peers add ADDRESS[:PORT]), or give ADDRESS:PORT", name)
	}
	return "", nil, fmt.Errorf("no peer %q; known: %s", name, strings.Join(known, ", "))
}

// peerTrust orders how the daemon learned of a peer, as the daemon does:
// by hand or config, then handshake, then mDNS.
func peerTrust(p loopsy.Peer) int {
	if p.ManuallyAdded || p.Source == "manual" || p.Source == "config" {
		return 3
	}
	if p.Source == "handshake" {
		return 2
	}
	return 1
}

// peerKey is the key to present to a peer: --key-file, else
// $ORCHESTRD_PEER_KEY, else this daemon's own (Loopsy peers list each
// other's keys in allowed_keys). This daemon's own key is the key to its
// own API: it is never sent to a peer only an mDNS answer vouches for,
// since anyone on the network can answer with a known host name.
func peerKey(home, keyFile, name string, peer *loopsy.Peer) (string, error) {
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return "", fmt.Errorf("reading the peer key: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if k := strings.TrimSpace(os.Getenv("ORCHESTRD_PEER_KEY")); k != "" {
		return k, nil
	}
	if peer != nil && peer.Source == "mdns" && !peer.ManuallyAdded {
		addr := net.JoinHostPort(peer.Address, strconv.Itoa(peer.Port))
		return "", fmt.Errorf("peer %s (%s) was found by mDNS only, which anyone on the network can answer, so this daemon's key is not sent to it: "+
			"add it yourself (orchestrd peers add %s --node-id %s), or give --key-file", name, addr, addr, peer.NodeID)
	}
	return ownKey(home)
}

// runOnPeer runs argv on a peer's lanes through its HTTP API, streaming its
// output here; Ctrl-C cancels it there.
func runOnPeer(home, peer, keyFile string, argv []string, cwd string, env map[string]string, timeout time.Duration,
	stdout, stderr io.Writer, sig <-chan os.Signal) int {
	base, known, err := peerTarget(home, peer)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd run: %v\n", err)
		return exitFailure
	}
	key, err := peerKey(home, keyFile, peer, known)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd run: %v\n", err)
		return exitFailure
	}
	c := loopsy.New(base, key, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := make(chan string, 1)
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-sig:
		case <-ctx.Done():
			return
		}
		close(interrupted)
		select {
		case id := <-jobs:
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := c.Cancel(cctx, id); err != nil {
				fmt.Fprintf(stderr, "orchestrd run: cancelling job %s on %s: %v\n", id, peer, err)
				cancel()
			}
			ccancel()
		default:
			cancel()
		}
	}()
	ex := loopsy.Exec{Command: argv[0], Args: argv[1:], Cwd: cwd, Env: env, Timeout: timeout.Milliseconds()}
	var jobID string
	exit, err := c.Stream(ctx, ex, func(id string) { jobID = id; jobs <- id }, func(ev loopsy.Event) {
		switch ev.Type {
		case "stdout":
			io.WriteString(stdout, ev.Data)
		case "stderr":
			io.WriteString(stderr, ev.Data)
		case "dropped":
			fmt.Fprintf(stderr, "orchestrd run: the peer dropped %d bytes of output because this client fell behind\n", ev.Bytes)
		}
	})
	if err != nil {
		select {
		case <-interrupted:
			fmt.Fprintf(stderr, "orchestrd run: interrupted\n")
			return exitCancelled
		default:
		}
		var ae *loopsy.Error
		if errors.As(err, &ae) {
			fmt.Fprintf(stderr, "orchestrd run: %s refused: %s (code %d)\n", peer, ae.Message, ae.Code)
		} else {
			fmt.Fprintf(stderr, "orchestrd run: %v\n", err)
		}
		return exitFailure
	}
	select {
	case <-interrupted:
		fmt.Fprintf(stderr, "orchestrd run: job %s on %s was cancelled\n", jobID, peer)
		return exitCancelled
	default:
	}
	if code, err := strconv.Atoi(exit.Data); err == nil && !exit.Killed {
		if code > 255 || code < 0 {
			return exitFailure
		}
		return code
	}
	switch {
	case exit.TimedOut:
		fmt.Fprintf(stderr, "orchestrd run: job %s on %s timed out\n", jobID, peer)
		return exitTimeout
	case exit.Signal != "":
		fmt.Fprintf(stderr, "orchestrd run: job %s on %s was killed by signal %s\n", jobID, peer, exit.Signal)
		if n := signalNumber(exit.Signal); n > 0 {
			return 128 + n
		}
	case exit.Killed:
		fmt.Fprintf(stderr, "orchestrd run: job %s on %s was killed (timeout or cancel)\n", jobID, peer)
		return exitTimeout
	case exit.Error != "":
		fmt.Fprintf(stderr, "orchestrd run: job %s on %s failed: %s\n", jobID, peer, exit.Error)
	}
	return exitFailure
}
