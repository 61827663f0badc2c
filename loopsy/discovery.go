package loopsy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/mdns"
	"github.com/rs/zerolog"
)

// MDNSService is Loopsy's service type.
const MDNSService = "_loopsy._tcp"

// mdnsQueryTimeout bounds one browse.
const mdnsQueryTimeout = 3 * time.Second

// zlogWriter routes the lines of a standard-library logger (net/http's
// server errors such as failed TLS handshakes, the mdns library's) into
// zerolog at debug level: a scanner on the port must not fill the log.
type zlogWriter struct{ log zerolog.Logger }

func (w zlogWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// advertisedIPs are the addresses announced for the API: the listen
// address when it is one, else every up, non-loopback interface's.
func advertisedIPs(listen string) []net.IP {
	host, _, _ := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return []net.IP{ip}
	}
	var out []net.IP
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() {
				out = append(out, n.IP)
			}
		}
	}
	if len(out) == 0 {
		out = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	return out
}

// startDiscovery announces this node as _loopsy._tcp (TXT nodeId,
// version, platform, capabilities) and browses for others every
// interval, adding each one found as a peer (source mdns). It returns a
// stop function; an error means mDNS could not start (the API goes on).
func (d *Domain) startDiscovery(interval time.Duration) (func(), error) {
	host, _ := os.Hostname()
	if host == "" {
		host = "orchestrd"
	}
	txt := []string{"nodeId=" + d.nodeID, "version=" + d.cfg.ProtocolVersion, "platform=" + runtime.GOOS,
		"capabilities=" + strings.Join(d.cfg.Capabilities, ",")}
	svc, err := mdns.NewMDNSService(d.nodeID, MDNSService, "", host+".", d.cfg.Port, advertisedIPs(d.cfg.Addr), txt)
	if err != nil {
		return nil, fmt.Errorf("announcing %s: %w", MDNSService, err)
	}
	logger := log.New(zlogWriter{d.log}, "", 0)
	srv, err := mdns.NewServer(&mdns.Config{Zone: svc, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("announcing %s on mDNS: %w", MDNSService, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d.browse(ctx, logger)
			t.Reset(interval)
		}
	}()
	return func() {
		cancel()
		<-done
		srv.Shutdown()
	}, nil
}

// browse asks once for _loopsy._tcp and records what answers.
func (d *Domain) browse(ctx context.Context, logger *log.Logger) {
	entries := make(chan *mdns.ServiceEntry, 64)
	go func() {
		defer close(entries)
		q := mdns.DefaultParams(MDNSService)
		q.Entries, q.Timeout, q.Logger, q.DisableIPv6 = entries, mdnsQueryTimeout, logger, true
		if err := mdns.QueryContext(ctx, q); err != nil {
			d.log.Debug().Err(err).Msg("loopsy: mDNS browse")
		}
	}()
	for e := range entries {
		d.found(e)
	}
}

// found records a peer an mDNS answer named.
func (d *Domain) found(e *mdns.ServiceEntry) {
	fields := map[string]string{}
	for _, f := range e.InfoFields {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	id := fields["nodeId"]
	if id == "" || id == d.nodeID || e.Port < 1 || e.Port > 65535 || len(id) > 256 {
		return
	}
	addr := e.AddrV4
	if addr == nil && e.AddrV6IPAddr != nil {
		addr = e.AddrV6IPAddr.IP
	}
	if addr == nil {
		return
	}
	var caps []string
	if c := fields["capabilities"]; c != "" {
		caps = strings.Split(c, ",")
	}
	pi, added, done := d.peers.add(PeerInfo{NodeID: id, Hostname: strings.TrimSuffix(e.Host, "."), Address: addr.String(), Port: e.Port,
		Platform: fields["platform"], Version: fields["version"], Capabilities: caps, Status: "online", LastSeen: time.Now().UnixMilli(),
		Source: "mdns"})
	if err := <-done; err != nil {
		ev := d.log.Warn()
		if errors.As(err, new(*refusal)) { // the registry is full: a flood of answers must not flood the log
			ev = d.log.Debug()
		}
		ev.Err(err).Str("node_id", id).Msg("loopsy: recording a peer found by mDNS")
		return
	}
	if added {
		d.emit(PeerAdded{NodeID: pi.NodeID, Address: pi.Address, Port: pi.Port, Source: "mdns"})
	}
}
