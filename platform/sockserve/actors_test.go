package sockserve

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

func newSys(t *testing.T) (*actors.System, chan actors.PanicInfo) {
	panics := make(chan actors.PanicInfo, 8)
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(p actors.PanicInfo) { panics <- p }})
	t.Cleanup(sys.Shutdown)
	return sys, panics
}

func wantPanic(t *testing.T, panics chan actors.PanicInfo, kind string) {
	t.Helper()
	select {
	case p := <-panics:
		if p.Kind != kind || p.Directive != actors.Stop {
			t.Fatalf("panic in %s/%s (%s), want a %s actor stopped", p.Kind, p.ID, p.Directive, kind)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no actor panic reported")
	}
}

// Each accepted connection is an actor of Kind under the server's
// supervisor, its Serve the actor's goroutine: a panic there is the
// actor's (it alone stops, the peer told by Panicked), the others go on,
// and Close ends every actor and goroutine.
func TestServerConnActors(t *testing.T) {
	sys, panics := newSys(t)
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Path: path, Component: "test", System: sys, Supervisor: "tests", Kind: "test",
		Panicked: func(c *Conn) { c.Write([]byte("panicked\n"), time.Second) },
		Serve: func(c *Conn) {
			lr := bufio.NewReader(c.NC)
			for {
				line, err := lr.ReadString('\n')
				if err != nil {
					return
				}
				if line == "boom\n" {
					panic("boom")
				}
				c.Write([]byte("echo "+line), time.Second)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(ln)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	good, gr := dial()
	io.WriteString(good, "hi\n")
	if l, _ := gr.ReadString('\n'); l != "echo hi\n" {
		t.Fatalf("echo: %q", l)
	}
	bad, br := dial()
	io.WriteString(bad, "boom\n")
	if l, _ := br.ReadString('\n'); l != "panicked\n" {
		t.Fatalf("the panicked peer heard %q", l)
	}
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("the panicked connection stays open")
	}
	wantPanic(t, panics, "test")
	io.WriteString(good, "again\n")
	if l, _ := gr.ReadString('\n'); l != "echo again\n" {
		t.Fatalf("the other connection after the panic: %q", l)
	}
	list, open := srv.List(api.MaxListedConns)
	if open != 1 || len(list) != 1 || list[0].Kind != "test" || list[0].Pid == 0 {
		t.Fatalf("listed %+v (%d open)", list, open)
	}
	srv.Close()
	if l, err := gr.ReadString('\n'); err == nil {
		t.Fatalf("open after Close: %q", l)
	}
	if tr := sys.Tree(); len(tr) != 0 {
		t.Fatalf("actors left after Close: %+v", tr)
	}
}

// Each request StreamHandler serves is a stream actor: listed while it
// runs, a panic of its handler the actor's (the client's response cut),
// another stream undisturbed; the actor stopping cancels the handler.
func TestStreamActors(t *testing.T) {
	sys, panics := newSys(t)
	sup, err := NewSupervisor(sys, "streams", "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/s", StreamHandler(sup, "stream", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: hello\n\n")
		http.NewResponseController(w).Flush()
		if r.URL.Query().Get("boom") != "" {
			panic("boom")
		}
		<-r.Context().Done()
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	defer hs.Close()
	get := func(q string) (*http.Response, *bufio.Reader) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/s" + q)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		br := bufio.NewReader(resp.Body)
		if l, _ := br.ReadString('\n'); l != "data: hello\n" {
			t.Fatalf("first line %q", l)
		}
		return resp, br
	}
	_, gr := get("")
	_, br := get("?boom=1")
	wantPanic(t, panics, "stream")
	if _, err := io.ReadAll(br); err == nil {
		t.Fatal("the panicked stream ended cleanly, want it cut")
	}
	// The client sees its response cut before the actor has stopped: wait
	// for it to be unlisted.
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, open := sup.List(api.MaxListedConns)
		if open == 1 && len(list) == 1 && list[0].Kind == "stream" && strings.HasPrefix(list[0].Address, "127.0.0.1:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listed %+v (%d open), want the other stream alone", list, open)
		}
		time.Sleep(5 * time.Millisecond) // polling the list, not for correctness
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Stopped, the actor cancelled the handler: the response ends.
	if _, err := io.ReadAll(gr); err != nil {
		t.Fatalf("the stream after its actor stopped: %v", err)
	}
}
