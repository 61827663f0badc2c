package fleetrun

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// NATSBinary is Debian's nats-server; t is skipped when it is not
// installed.
func NATSBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			t.Skip("nats-server is not installed (Debian's nats-server package; .ci/run installs it)")
		}
		bin = "/usr/sbin/nats-server"
	}
	return bin
}

// NATSUsers are the users of an external NATS server for the nodes whose
// credentials are at paths (cluster init's and add-node's files): each
// node's nkey with its permissions, as those commands print them.
func NATSUsers(t testing.TB, paths ...string) []string {
	t.Helper()
	var users []string
	for _, p := range paths {
		pub, lanes, err := fleet.NodeKey(p)
		if err != nil {
			t.Fatal(err)
		}
		var c struct{ Node string }
		if b, err := os.ReadFile(p); err != nil || json.Unmarshal(b, &c) != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		users = append(users, fleet.NATSUser(c.Node, pub, lanes))
	}
	return users
}

// NATSServer is one server of an operator's NATS: Debian's nats-server,
// as an operator runs it.
type NATSServer struct {
	Conf string // its config file
	D    *daemonrun.Daemon
}

// StartNATS starts n nats-server processes (bin) on 127.0.0.1 with
// JetStream, whose users are users (NATSUsers), clustered when n > 1, each
// in a directory dir makes; it returns their client URLs, comma-separated.
// They are stopped when t ends.
func StartNATS(t testing.TB, bin string, n int, users []string, dir func() string) (string, []*NATSServer) {
	t.Helper()
	clientP, routeP := make([]int, n), make([]int, n)
	for i := range n {
		clientP[i], routeP[i] = FreePort(t), FreePort(t)
	}
	var urls []string
	srvs := make([]*NATSServer, n)
	for i := range n {
		d := dir()
		conf := fmt.Sprintf("server_name: ext%d\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\nauthorization { users = [ %s ] }\n",
			i, clientP[i], filepath.Join(d, "js"), strings.Join(users, ", "))
		if n > 1 {
			var routes []string
			for k := range n {
				if k != i {
					routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", routeP[k]))
				}
			}
			conf += fmt.Sprintf("cluster { name: ext, listen: 127.0.0.1:%d, routes: [%s] }\n", routeP[i], strings.Join(routes, ", "))
		}
		path := filepath.Join(d, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		srvs[i] = &NATSServer{Conf: path}
		srvs[i].start(t, bin)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", clientP[i]))
	}
	return strings.Join(urls, ","), srvs
}

func (s *NATSServer) start(t testing.TB, bin string) {
	t.Helper()
	cmd := exec.Command(bin, "-c", s.Conf)
	var out testio.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	d, err := daemonrun.Start(cmd, filepath.Dir(s.Conf))
	if err != nil {
		t.Fatalf("starting nats-server: %v", err)
	}
	s.D = d
	t.Cleanup(func() {
		// A test that failed with the server still up has it dump its
		// goroutines (SIGQUIT: the Go runtime prints every stack and
		// exits): what a server that answers a request nobody gets back
		// was doing.
		quit := t.Failed()
		select {
		case <-d.Done(): // killed by the test
			quit = false
		default:
			if quit {
				d.Quit()
			} else {
				_ = d.Stop(10 * time.Second)
			}
		}
		if t.Failed() {
			log, dump := out.String(), ""
			if i := strings.Index(log, "SIGQUIT: quit"); i >= 0 {
				log, dump = log[:i], log[i:]
			}
			t.Logf("nats-server %s:\n%s", s.Conf, tail(log, 3000))
			if quit {
				t.Logf("nats-server %s's busy goroutines and those in JetStream's reads, at SIGQUIT:\n%s", s.Conf, busyStacks(dump, 24<<10))
			}
		}
	})
}

// busyStacks are the goroutines of a Go program's SIGQUIT dump that were
// running or runnable, or whose stack reads a stream's messages (a
// message get, a last-by-subject lookup), at most max bytes of them.
func busyStacks(dump string, max int) string {
	var b strings.Builder
	for _, g := range strings.Split(dump, "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(head, "[running") && !strings.Contains(head, "[runnable") &&
			!strings.Contains(g, "MsgGet") && !strings.Contains(g, "msgGet") && !strings.Contains(g, "LastMsg") &&
			!strings.Contains(g, "loadLast") && !strings.Contains(g, "LastBySubj") {
			continue
		}
		if b.Len()+len(g) > max {
			b.WriteString("(more left out)\n")
			break
		}
		b.WriteString(g)
		b.WriteString("\n\n")
	}
	if b.Len() == 0 {
		return "(none)"
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
