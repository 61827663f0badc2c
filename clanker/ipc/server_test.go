package ipc

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle timer (a message to a stopped
		// actor); it ends by itself a second later.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// handler answers hello; "boom" panics (on the connection's goroutine, as
// a handler's bug would).
type handler struct{}

func (handler) Handle(typ string, _ []byte, reply func([]byte, error)) {
	if typ == "boom" {
		panic("test handler: boom")
	}
	reply([]byte(`{"hi":1}`), nil)
}

func dial(t *testing.T, path string) (*net.UnixConn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c *net.UnixConn, r *bufio.Reader, typ string) string {
	t.Helper()
	if _, err := c.Write([]byte(`{"v":1,"id":7,"type":"` + typ + `","payload":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to %s: %v", typ, err)
	}
	return line
}

// Each pod's connection is a "pod" actor under the repo's "pods"
// supervisor; a panic serving one is that actor's (actor.panicked, it
// stops), the pod hears an error line and is closed, and another pod's
// connection goes on.
func TestPodPanicCostsItsConnectionAlone(t *testing.T) {
	panics := make(chan actors.PanicInfo, 4)
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(p actors.PanicInfo) { panics <- p }})
	defer sys.Shutdown()
	sock := filepath.Join(t.TempDir(), "ipc.sock")
	s, err := Listen(sock, nil, "/src/app", handler{}, nil, sys, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		drained, _ := s.Close()
		<-drained
	}()
	good, gr := dial(t, sock)
	if got := roundTrip(t, good, gr, "hello"); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("hello: %q", got)
	}
	bad, br := dial(t, sock)
	if got := roundTrip(t, bad, br, "boom"); !strings.Contains(got, `"ok":false`) || !strings.Contains(got, "internal error") {
		t.Fatalf("the panicked pod heard %q, want an error line", got)
	}
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("the panicked pod's connection stays open")
	}
	select {
	case p := <-panics:
		if p.Kind != "pod" || p.Directive != actors.Stop {
			t.Fatalf("panic in %s/%s (%s), want a pod actor stopped", p.Kind, p.ID, p.Directive)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no actor panic reported")
	}
	if got := roundTrip(t, good, gr, "hello"); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("the other pod after the panic: %q", got)
	}
	list, open := s.Conns(api.MaxListedConns)
	if open != 1 || len(list) != 1 || list[0].Kind != "pod" || list[0].Pid == 0 {
		t.Fatalf("pod connections listed: %+v (%d open), want the good one with its pid", list, open)
	}
	// The tree shows it under the repo's supervisor, with its info.
	var found bool
	for _, n := range sys.Tree() {
		if n.Kind == "pods" && n.ID == "src-app" && len(n.Children) == 1 && n.Children[0].Kind == "pod" && n.Children[0].Info != nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("no pods/src-app with one pod in the tree: %+v", sys.Tree())
	}
}

// slowHandler holds a "slow" request until release is closed; got says it
// has one.
type slowHandler struct{ got, release chan struct{} }

func (h slowHandler) Handle(typ string, _ []byte, reply func([]byte, error)) {
	if typ == "slow" {
		h.got <- struct{}{}
		go func() {
			<-h.release
			reply([]byte(`{}`), nil)
		}()
		return
	}
	reply([]byte(`{"hi":1}`), nil)
}

// A socket closed returns at once while its connections still end, and
// the repo may serve it again meanwhile (its actor restarted): the new
// server's connections supervisor is named apart from the old one's, still
// there, and pods are answered by it at once.
func TestServedAgainWhileTheOldOneCloses(t *testing.T) {
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	sock := filepath.Join(t.TempDir(), "ipc.sock")
	h := slowHandler{got: make(chan struct{}, 1), release: make(chan struct{})}
	old, err := Listen(sock, nil, "/src/app", h, nil, sys, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dial(t, sock)
	if _, err := c.Write([]byte(`{"v":1,"id":1,"type":"slow","payload":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	<-h.got
	drained, err := old.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(h.release)
		<-drained
	}()
	again, err := Listen(sock, nil, "/src/app", h, nil, sys, zerolog.Nop())
	if err != nil {
		t.Fatalf("serving the socket again while the old server closes: %v", err)
	}
	defer func() {
		d, _ := again.Close()
		<-d
	}()
	pod, pr := dial(t, sock)
	if got := roundTrip(t, pod, pr, "hello"); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("hello to the socket served again: %q", got)
	}
}
