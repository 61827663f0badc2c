package fleetrun

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort is a port on 127.0.0.1 nothing listens on now, handed out once
// in this test binary, and below Linux's ephemeral range (32768 and up):
// a port the kernel gave a listener (":0") and took back was soon given
// again to another test's outgoing connection, and a daemon failed to
// bind its route port ("address already in use").
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if portsGiven[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatal("no free port below 32000")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ClusterTable is a node's [cluster] table, heartbeats every 2 s:
// embedded (its client and route ports, routes to the other nodes' route
// ports) or external (url; three replicas when it names several servers).
func ClusterTable(name string, client, route int, routes []int, url string) string {
	if url != "" {
		replicas := 1
		if strings.Contains(url, ",") {
			replicas = 3
		}
		return fmt.Sprintf("[cluster]\nenabled = true\nname = %q\nurl = %q\nreplicas = %d\nheartbeat = \"2s\"\nstart_timeout = \"4m\"\n", name, url, replicas)
	}
	var rs []string
	for _, p := range routes {
		rs = append(rs, strconv.Quote(fmt.Sprintf("nats-route://127.0.0.1:%d", p)))
	}
	return fmt.Sprintf("[cluster]\nenabled = true\nname = %q\nlisten = \"127.0.0.1:%d\"\ncluster_listen = \"127.0.0.1:%d\"\nroutes = [%s]\nheartbeat = \"2s\"\nstart_timeout = \"4m\"\n",
		name, client, route, strings.Join(rs, ", "))
}
