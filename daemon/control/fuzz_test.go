package control

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzConnLines feeds arbitrary bytes to a server connection as a client
// stream, then half-closes. Whatever the bytes, the server must not panic,
// every line it sends must be a JSON response or event, and the connection
// must end (answered and closed) rather than hang.
func FuzzConnLines(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"ping"}` + "\n",
		`{"id":1,"method":"connect","params":{"version":"x"}}` + "\n" + `{"id":2,"method":"disconnect"}` + "\n" + `{"id":3,"method":"ping"}`,
		"not json\n{\"id\":2}\n[]\n\"str\"\n",
		`{"id":1,"method":"job.submit","params":{"argv":["x"]}}` + "\n" + `{"id":2,"method":"job.wait","params":{"id":"j-1"}}` + "\n",
		`{"id":1,"method":"job.wait","params":{"id":"j-1","timeout_ms":1}}` + "\n",
		`{"id":1,"method":"events.subscribe","params":{"kinds":["conn.*"]}}` + "\n" + `{"id":2,"method":"job.list","params":{"state":"running"}}` + "\n",
		`{"id":-1,"method":"ping"}` + "\r\n" + `{"id":18446744073709551616,"method":"ping"}` + "\n",
		`{"id":1,"method":"ping","params":{"pad":"` + string(bytes.Repeat([]byte("x"), 5000)) + `"}}` + "\n",
		"\x00\xff\n\n\r\n{",
		`{"id":1,"method":"job.cancel","params":{"id":"j-1"}}` + "\n" + `{"id":2,"method":"tree.get"}` + "\n" + `{"id":3,"method":"metrics.get"}` + "\n" + `{"id":4,"method":"lane.list"}`,
		`{"id":1,"method":"initialize","params":{"version":"0.1.1","x":[1]}}` + "\n" + `{"id":2,"method":"subscribe","params":{"a":1}}` + "\n" + `{"id":3,"method":"initialize","params":{"version":7}}`,
		`{"id":1,"method":"test.later"}` + "\n" + `{"id":2,"method":"test.async"}` + "\n" + `{"id":3,"method":"test.echo","params":{"text":"x"}}` + "\n" + `{"id":4,"method":"test.later"}`,
	} {
		f.Add([]byte(s))
	}
	h := newHarness(f, func(o *Options) { o.MaxLine = 4096 })
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("unix", h.path)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		go func() {
			nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			nc.Write(data) // fails once the server has hung up; that's fine
			nc.(*net.UnixConn).CloseWrite()
		}()
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		out, err := io.ReadAll(nc)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection neither answered nor closed within 10s; got %q", out)
			}
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("server sent a non-JSON line %q", line)
			}
			_, isResp := m["id"]
			_, isEvent := m["event"]
			if isResp == isEvent {
				t.Fatalf("server line is neither a response nor an event: %q", line)
			}
		}
	})
}
