package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/testio"
)

// httpDoHdr is httpDo with extra request headers; it answers the
// response's headers too.
func httpDoHdr(t *testing.T, method, url, key, body string, hdr map[string]string) (httpAnswer, http.Header) {
	t.Helper()
	a, h, err := tryHTTP(method, url, key, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return a, h
}

// tryHTTP makes one request; safe from any goroutine.
func tryHTTP(method, url, key, body string, hdr map[string]string) (httpAnswer, http.Header, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return httpAnswer{}, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpAnswer{}, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	a, err := readAnswer(resp)
	return a, resp.Header, err
}

// Shared context: set, read, list, delete; its bounds and codes; TTL
// expiry for readers at once and in the store by the pruner; an
// acknowledged PUT survives kill -9 of the daemon.
func TestHTTPContext(t *testing.T) {
	t.Parallel()
	cfg := "[http.context]\nmax_value_bytes = 64\nmax_entries = 3\nprune_interval = \"50ms\"\n[http.rate_limits]\ncontext = 0\n"
	d, base, key := httpDaemon(t, cfg)
	a, _ := httpDoHdr(t, "PUT", base+"/context/build%2Fstatus", key, `{"value":"green","ttl":3600}`, map[string]string{"X-Loopsy-Node-Id": "laptop-1"})
	if a.status != 200 || a.body["key"] != "build/status" || a.body["value"] != "green" || a.body["fromNodeId"] != "laptop-1" ||
		a.body["ttl"] != float64(3600) || a.body["expiresAt"].(float64)-a.body["createdAt"].(float64) != 3600e3 {
		t.Fatalf("put: %d %s", a.status, a.raw)
	}
	created := a.body["createdAt"]
	if g := httpDo(t, "GET", base+"/context/build%2Fstatus", key, ""); g.status != 200 || g.raw != a.raw {
		t.Fatalf("get: %d %s, want %s", g.status, g.raw, a.raw)
	}
	if a := httpDo(t, "PUT", base+"/context/build%2Fstatus", key, `{"value":"red"}`); a.status != 200 || a.body["createdAt"] != created ||
		a.body["fromNodeId"] != "local" || a.body["expiresAt"] != nil {
		t.Fatalf("update: %d %s", a.status, a.raw)
	}
	wantHTTPError(t, httpDo(t, "GET", base+"/context/nope", key, ""), 404, 5001)
	wantHTTPError(t, httpDo(t, "DELETE", base+"/context/nope", key, ""), 404, 5001)
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/big", key, `{"value":"`+strings.Repeat("x", 65)+`"}`), 413, 5002)
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/big", key, `{"value":"`+strings.Repeat("x", 200<<10)+`"}`), 413, 9003)
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/k", key, `{"value":`), 400, 9003)
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/k", key, `{"ttl":5}`), 400, 9003)
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/k", key, `{"value":"v","ttl":-1}`), 400, 9003)
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/"+strings.Repeat("k", 257), key, `{"value":"v"}`), 400, 9003)
	for _, k := range []string{"a", "b"} {
		if a := httpDo(t, "PUT", base+"/context/"+k, key, `{"value":"`+k+`"}`); a.status != 200 {
			t.Fatalf("put %s: %d %s", k, a.status, a.raw)
		}
	}
	wantHTTPError(t, httpDo(t, "PUT", base+"/context/c", key, `{"value":"c"}`), 400, 5003)
	if l := httpDo(t, "GET", base+"/context?prefix=build", key, ""); l.status != 200 || len(l.body["entries"].([]any)) != 1 {
		t.Fatalf("list build*: %s", l.raw)
	}
	if a := httpDo(t, "DELETE", base+"/context/b", key, ""); a.status != 200 || a.body["success"] != true || a.body["key"] != "b" {
		t.Fatalf("delete: %d %s", a.status, a.raw)
	}

	// A short TTL: gone for readers once expired, then from the store.
	if a := httpDo(t, "PUT", base+"/context/short", key, `{"value":"v","ttl":0.2}`); a.status != 200 {
		t.Fatalf("put short: %d %s", a.status, a.raw)
	}
	eventually(t, 30*time.Second, "the expired entry gone", func() bool {
		return httpDo(t, "GET", base+"/context/short", key, "").status == 404
	})
	if strings.Contains(httpDo(t, "GET", base+"/context", key, "").raw, "short") {
		t.Fatal("the expired entry is listed")
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.home, "state.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually(t, 30*time.Second, "the expired entry pruned from the store", func() bool {
		var n int
		return db.QueryRow(`SELECT count(*) FROM http_context WHERE key = 'short'`).Scan(&n) == nil && n == 0
	})

	// Acknowledged is durable: kill -9, start again, it is there.
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.proc.Done()
	d2 := startDaemonAt(t, d.home, "")
	base2 := lastHTTPBase(d2)
	l := httpDo(t, "GET", base2+"/context", key, "")
	if l.status != 200 || !strings.Contains(l.raw, `"key":"build/status","value":"red"`) || !strings.Contains(l.raw, `"key":"a"`) ||
		strings.Contains(l.raw, `"key":"b"`) {
		t.Fatalf("after kill -9: %s", l.raw)
	}
}

// Peers: manual, handshake (and a version it refuses), removal; a health
// check finds a live peer online and a dead one offline; all of it kept
// across a restart.
func TestHTTPPeers(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemon(t, "[http.peers]\nhealth_interval = \"50ms\"\nhealth_failures = 2\nmanual = [\"192.0.2.77\"]\n")
	d.waitEvent("http.peer_added", func(e map[string]any) bool {
		return e["node_id"] == "manual-192.0.2.77:19532" && e["source"] == "config"
	})
	self := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/api/v1")
	_, port, _ := net.SplitHostPort(self)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := dead.Addr().(*net.TCPAddr).Port
	dead.Close()

	a := httpDo(t, "POST", base+"/peers", key, `{"address":"127.0.0.1","port":`+port+`}`)
	if a.status != 200 || a.body["nodeId"] != "manual-127.0.0.1:"+port || a.body["manuallyAdded"] != true || a.body["status"] != "unknown" {
		t.Fatalf("add: %d %s", a.status, a.raw)
	}
	live := a.body["nodeId"]
	if a := httpDo(t, "POST", base+"/peers", key, fmt.Sprintf(`{"address":"127.0.0.1","port":%d,"nodeId":"dead-one","hostname":"gone"}`, deadPort)); a.status != 200 {
		t.Fatalf("add dead: %d %s", a.status, a.raw)
	}
	d.waitEvent("http.peer_status_changed", func(e map[string]any) bool { return e["node_id"] == live && e["status"] == "online" })
	d.waitEvent("http.peer_status_changed", func(e map[string]any) bool {
		return e["node_id"] == "dead-one" && e["status"] == "offline" && e["failures"] == float64(2)
	})
	d.waitEvent("http.peer_added", func(e map[string]any) bool { return e["node_id"] == "dead-one" && e["source"] == "manual" })

	hs := `{"nodeId":"peer-7","hostname":"build-box","platform":"linux","version":"1.0.53","port":19532,"capabilities":["execute"]}`
	a = httpDo(t, "POST", base+"/peers/handshake", key, hs)
	if a.status != 200 || a.body["nodeId"] == "" || a.body["version"] == "" || a.body["port"] != jsonNumber(port) {
		t.Fatalf("handshake: %d %s", a.status, a.raw)
	}
	wantHTTPError(t, httpDo(t, "POST", base+"/peers/handshake", key, strings.Replace(hs, `"1.0.53"`, `"2.0.0"`, 1)), 400, 2005)
	d.waitEvent("http.handshake_refused", func(e map[string]any) bool { return e["version"] == "2.0.0" })
	wantHTTPError(t, httpDo(t, "POST", base+"/peers/handshake", key, `{"nodeId":"x"}`), 400, 9003)
	wantHTTPError(t, httpDo(t, "POST", base+"/peers", key, `{"port":1}`), 400, 9003)
	wantHTTPError(t, httpDo(t, "POST", base+"/peers", key, `{"address":"a","port":70000}`), 400, 9003)

	l := httpDo(t, "GET", base+"/peers", key, "")
	if !strings.Contains(l.raw, `"nodeId":"peer-7","hostname":"build-box","address":"127.0.0.1","port":19532`) {
		t.Fatalf("peers: %s", l.raw)
	}
	if a := httpDo(t, "DELETE", base+"/peers/dead-one", key, ""); a.status != 200 || a.body["nodeId"] != "dead-one" {
		t.Fatalf("remove: %d %s", a.status, a.raw)
	}
	wantHTTPError(t, httpDo(t, "DELETE", base+"/peers/dead-one", key, ""), 404, 2001)
	st := httpDo(t, "GET", base+"/status", key, "")
	if p, _ := st.body["peers"].(map[string]any); p == nil || p["total"] != float64(3) {
		t.Fatalf("status peers: %s", st.raw)
	}

	d.stop()
	d2 := startDaemonAt(t, d.home, "")
	base2 := lastHTTPBase(d2)
	l = httpDo(t, "GET", base2+"/peers", key, "")
	if !strings.Contains(l.raw, `"nodeId":"peer-7"`) || !strings.Contains(l.raw, `"nodeId":"`+live.(string)+`"`) || strings.Contains(l.raw, "dead-one") {
		t.Fatalf("peers after a restart: %s", l.raw)
	}
}

// lastHTTPBase is the API's base URL of the daemon started last in d's
// home: once its daemon.started is logged (after the API started), its
// http.listening is the log's last.
func lastHTTPBase(d *testDaemon) string {
	d.started(d.cmd.Process.Pid)
	addr := ""
	for _, e := range d.events() {
		if e["kind"] == "http.listening" {
			addr, _ = e["addr"].(string)
		}
	}
	return "http://" + addr + "/api/v1"
}

func jsonNumber(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// push sends r as the file of a push to dest; checksum, if not "", goes
// in the X-Loopsy-Checksum header.
func push(t *testing.T, base, key, dest, checksum string, r io.Reader) httpAnswer {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		mw.WriteField("destPath", dest)
		fw, _ := mw.CreateFormFile("file", filepath.Base(dest))
		if _, err := io.CopyBuffer(fw, r, make([]byte, 1<<20)); err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(mw.Close())
	}()
	req, _ := http.NewRequest("POST", base+"/transfer/push", pr)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if checksum != "" {
		req.Header.Set("X-Loopsy-Checksum", checksum)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := readAnswer(resp)
	return a
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// Transfers: push, pull and list under allowed_paths only, on real
// paths: a symlink or .. out is refused, as are orchestrd's own home,
// a file too large and a wrong checksum; a refused push leaves nothing.
func TestHTTPTransfer(t *testing.T) {
	t.Parallel()
	allowed, outside := shortTemp(t), shortTemp(t)
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "link")); err != nil {
		t.Fatal(err)
	}
	home := shortTemp(t)
	cfg := fmt.Sprintf("[http.transfer]\nallowed_paths = [%q, %q]\nmax_file_size = 1048576\n[http.rate_limits]\ntransfer = 0\n", allowed, home)
	d, base, key := httpDaemonAt(t, home, fastConfig, cfg)

	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	dest := filepath.Join(allowed, "in", "deep", "data.bin")
	a := push(t, base, key, dest, sha(data), bytes.NewReader(data))
	if a.status != 200 || a.body["size"] != float64(len(data)) || a.body["checksum"] != sha(data) || a.body["path"] != dest {
		t.Fatalf("push: %d %s", a.status, a.raw)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, data) {
		t.Fatal("the pushed file differs")
	}
	d.waitEvent("http.transfer_done", func(e map[string]any) bool { return e["direction"] == "push" && e["path"] == dest })

	for _, c := range []struct {
		name, dest, sum string
		body            []byte
		status, code    int
	}{
		{"through a symlink", filepath.Join(allowed, "link", "evil"), "", data, 403, 4001},
		{"climbing out", allowed + "/../" + filepath.Base(outside) + "/evil", "", data, 403, 4001},
		{"into orchestrd's home", filepath.Join(home, "evil"), "", data, 403, 4001},
		{"too large", filepath.Join(allowed, "big"), "", bytes.Repeat([]byte("x"), 1<<20+1), 413, 4003},
		{"wrong checksum", filepath.Join(allowed, "sum"), strings.Repeat("0", 64), data, 400, 4004},
		{"relative", "rel/x", "", data, 400, 9003},
	} {
		wantHTTPError(t, push(t, base, key, c.dest, c.sum, bytes.NewReader(c.body)), c.status, c.code)
	}
	d.waitEvent("http.transfer_denied", func(e map[string]any) bool { return e["reason"] == "checksum_mismatch" })
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("the outside directory holds %d files", len(ents))
	}
	if ents, _ := os.ReadDir(allowed); len(ents) != 2 { // in, link
		t.Fatalf("the allowed directory holds %v", ents)
	}

	// Pull: the bytes, streamed; refused the same way.
	req, _ := http.NewRequest("POST", base+"/transfer/pull", strings.NewReader(`{"sourcePath":"`+dest+`"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, data) || resp.Header.Get("X-Loopsy-File-Size") != strconv.Itoa(len(data)) {
		t.Fatalf("pull: %d, %d bytes, headers %v", resp.StatusCode, len(got), resp.Header)
	}
	wantHTTPError(t, httpDo(t, "POST", base+"/transfer/pull", key, `{"sourcePath":"`+filepath.Join(allowed, "link", "secret")+`"}`), 403, 4001)
	wantHTTPError(t, httpDo(t, "POST", base+"/transfer/pull", key, `{"sourcePath":"`+filepath.Join(home, "http.key")+`"}`), 403, 4001)
	wantHTTPError(t, httpDo(t, "POST", base+"/transfer/pull", key, `{"sourcePath":"`+filepath.Join(allowed, "none")+`"}`), 404, 4002)
	wantHTTPError(t, httpDo(t, "POST", base+"/transfer/pull", key, `{}`), 400, 9003)

	l := httpDo(t, "POST", base+"/transfer/list", key, `{"path":"`+allowed+`"}`)
	if l.status != 200 || !strings.Contains(l.raw, `"name":"in","path":"`+allowed+`/in","type":"directory"`) ||
		!strings.Contains(l.raw, `"name":"link"`) || !strings.Contains(l.raw, `"type":"symlink"`) {
		t.Fatalf("list: %d %s", l.status, l.raw)
	}
	wantHTTPError(t, httpDo(t, "POST", base+"/transfer/list", key, `{"path":"`+outside+`"}`), 403, 4001)
	wantHTTPError(t, httpDo(t, "POST", base+"/transfer/list", key, `{"path":"`+filepath.Join(allowed, "link")+`"}`), 403, 4001)
}

// Transfers race a link (issue 21): a goroutine swaps a directory inside
// allowed_paths with a link to one outside, over and over, while pulls,
// lists and pushes go through it. None may read, list or write outside:
// each answers inside, refused or not found. A FIFO under the allowed
// root is refused at once, not waited on for a writer.
func TestHTTPTransferLinkRace(t *testing.T) {
	t.Parallel()
	allowed, outside := shortTemp(t), shortTemp(t)
	const secret = "OUTSIDE-SECRET"
	for _, name := range []string{"f", "only-outside"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// flip and flop are swapped by RENAME_EXCHANGE, so both always exist:
	// one is the real directory, the other a link to outside.
	flip, flop := filepath.Join(allowed, "flip"), filepath.Join(allowed, "flop")
	if err := os.Mkdir(flip, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(flip, "f"), []byte("inside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, flop); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, flip, unix.AT_FDCWD, flop, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("RENAME_EXCHANGE: %v", err)
	}
	fifo := filepath.Join(allowed, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	d, base, key := httpDaemon(t, fmt.Sprintf("[http.transfer]\nallowed_paths = [%q]\n[http.rate_limits]\ntransfer = 0\n", allowed))

	swaps := 0
	halt := testio.Hammer(1, func() bool {
		if unix.Renameat2(unix.AT_FDCWD, flip, unix.AT_FDCWD, flop, unix.RENAME_EXCHANGE) == nil {
			swaps++
		}
		return true
	})
	defer halt()

	// strays counts what pushes left outside, and removes it.
	strays := func() int {
		ents, _ := os.ReadDir(outside)
		n := 0
		for _, e := range ents {
			if e.Name() != "f" && e.Name() != "only-outside" {
				os.Remove(filepath.Join(outside, e.Name()))
				n++
			}
		}
		return n
	}
	const rounds = 800
	var pulled, refused, listed, pushed, pullsOut, listsOut, pushesOut int
	var odd []string
	i := 0
	for ; i < rounds || pulled == 0; i++ {
		if i == 20*rounds {
			t.Fatalf("no pull read the file inside in %d tries", i)
		}
		dir := flip
		if i%2 == 1 {
			dir = flop
		}
		a, _, err := tryHTTP("POST", base+"/transfer/pull", key, `{"sourcePath":"`+filepath.Join(dir, "f")+`"}`, nil)
		switch {
		case err != nil:
			t.Fatal(err)
		case strings.Contains(a.raw, secret):
			pullsOut++
		case a.status == 200 && a.raw == "inside":
			pulled++
		case a.status == 403:
			refused++
		case a.status == 404: // resolving met the swap (a link read as it became a directory)
		default:
			odd = append(odd, fmt.Sprintf("pull: %d %s", a.status, a.raw))
		}
		a, _, err = tryHTTP("POST", base+"/transfer/list", key, `{"path":"`+dir+`"}`, nil)
		switch {
		case err != nil:
			t.Fatal(err)
		case strings.Contains(a.raw, "only-outside"):
			listsOut++
		case a.status == 200:
			listed++
		case a.status != 403 && a.status != 404:
			odd = append(odd, fmt.Sprintf("list: %d %s", a.status, a.raw))
		}
		a = push(t, base, key, filepath.Join(dir, "pushed"), "", strings.NewReader("pushed"))
		if a.status == 200 {
			pushed++
		} else if a.status != 403 && a.status != 404 {
			odd = append(odd, fmt.Sprintf("push: %d %s", a.status, a.raw))
		}
		pushesOut += strays()
	}
	halt()
	t.Logf("%d swaps; of %d rounds, %d pulls read the file inside (%d refused), %d lists and %d pushes went inside", swaps, i, pulled, refused, listed, pushed)
	if pullsOut+listsOut+pushesOut > 0 {
		t.Errorf("through the link, of %d rounds: %d pulls read the file outside, %d lists listed outside, %d pushes wrote outside",
			i, pullsOut, listsOut, pushesOut)
	}
	if len(odd) > 0 {
		t.Errorf("%d answers neither inside nor refused, the first: %s", len(odd), odd[0])
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != secret {
		t.Errorf("the file outside was changed: %q", b)
	}
	d.waitEvent("http.transfer_denied", func(e map[string]any) bool { return e["direction"] == "pull" && e["reason"] == "path_denied" })

	// The FIFO: refused without waiting for a writer. Should the daemon
	// wait, a writer opened here lets it go before the test fails.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/transfer/pull", strings.NewReader(`{"sourcePath":"`+fifo+`"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if w, werr := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); werr == nil {
			w.Close()
		}
		t.Fatalf("a pull of a FIFO did not answer: %v", err)
	}
	a, _ := readAnswer(resp)
	wantHTTPError(t, a, 404, 4002)
}

// vmHWM is a process's peak resident memory, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// pattern is an endless reader of a repeating byte pattern.
// pattern reads byte i as i % 251, for ever.
type pattern struct{ n int64 }

// patternBlock is whole periods of pattern's bytes: Read copies them
// (a loop over a gigabyte in this race-built test binary took a minute of
// CPU).
var patternBlock = func() []byte {
	b := make([]byte, 251*4096)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

func (p *pattern) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		n += copy(b[n:], patternBlock[(p.n+int64(n))%251:])
	}
	p.n += int64(n)
	return n, nil
}

// A 256 MiB push streams to disk: the daemon's peak memory grows by at
// most half the file's size (a daemon that held the file would grow by
// all of it).
func TestHTTPPushLarge(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	const size = 256 << 20
	d, base, key := httpDaemon(t, fmt.Sprintf("[http.transfer]\nallowed_paths = [%q]\n", dir))
	before := vmHWM(t, d.cmd.Process.Pid)
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(&pattern{}, size), h)
	dest := filepath.Join(dir, "big.bin")
	a := push(t, base, key, dest, "", src)
	defer os.Remove(dest)
	if a.status != 200 || a.body["size"] != float64(size) || a.body["checksum"] != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("push: %d %s", a.status, a.raw)
	}
	if fi, err := os.Stat(dest); err != nil || fi.Size() != size {
		t.Fatalf("the file: %v %v", fi, err)
	}
	peak := vmHWM(t, d.cmd.Process.Pid)
	t.Logf("daemon peak RSS %d MiB before, %d MiB after a %d MiB push", before>>20, peak>>20, size>>20)
	if peak-before > size/2 {
		t.Fatalf("the daemon's peak memory grew by %d MiB for a %d MiB push", (peak-before)>>20, size>>20)
	}
}

// Rate limits under parallel load: exactly the bucket's worth passes per
// key, the rest get 429 code 9002 with Retry-After; another key, another
// category and /health are untouched; every request is in audit.jsonl
// with its key's name, never the key.
func TestHTTPRateLimits(t *testing.T) {
	t.Parallel()
	peerKey := strings.Repeat("ab", 32)
	d, base, key := httpDaemon(t, "[http.allowed_keys]\nlaptop = \""+peerKey+"\"\n[http.rate_limits]\nexec = 5\ncontext = 1000\n")
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(3)
		go func() {
			defer wg.Done()
			a, h, err := tryHTTP("GET", base+"/execute/jobs", key, "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			if a.status == 429 {
				if e, _ := a.body["error"].(map[string]any); e == nil || e["code"] != float64(9002) || h.Get("Retry-After") == "" {
					t.Errorf("429 without code 9002 and Retry-After: %s %v", a.raw, h)
				}
			}
			mu.Lock()
			counts[a.status]++
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			if a, _, err := tryHTTP("GET", base+"/health", "", "", nil); err != nil || a.status != 200 {
				t.Errorf("health under load: %d %v", a.status, err)
			}
		}()
		go func() {
			defer wg.Done()
			if a, _, err := tryHTTP("GET", base+"/context", key, "", nil); err != nil || a.status != 200 {
				t.Errorf("context under load: %d %s %v", a.status, a.raw, err)
			}
		}()
	}
	wg.Wait()
	if counts[200] != 5 || counts[429] != 35 {
		t.Fatalf("answers %v, want 5 ok and 35 limited", counts)
	}
	d.waitEvent("http.rate_limited", func(e map[string]any) bool { return e["key_name"] == "self" && e["category"] == "exec" })
	a := httpDo(t, "POST", base+"/execute", peerKey, `{"command":"echo","args":["hi"]}`)
	if a.status != 200 || a.body["stdout"] != "hi\n" {
		t.Fatalf("another key: %d %s", a.status, a.raw)
	}
	job := a.body["jobId"].(string)

	audit := filepath.Join(d.home, "audit.jsonl")
	var lines []map[string]any
	eventually(t, 30*time.Second, "the audit log has every request", func() bool {
		f, err := os.Open(audit)
		if err != nil {
			return false
		}
		defer f.Close()
		lines = lines[:0]
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.Contains(sc.Text(), key) || strings.Contains(sc.Text(), peerKey) {
				t.Fatalf("a key in the audit log: %s", sc.Text())
			}
			var m map[string]any
			if err := jsonUnmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("audit line %q: %v", sc.Text(), err)
			}
			lines = append(lines, m)
		}
		return len(lines) >= 121
	})
	limited, withJob := 0, false
	for _, l := range lines {
		if l["status"] == float64(429) && l["key_name"] == "self" && l["path"] == "/api/v1/execute/jobs" {
			limited++
		}
		if l["job_id"] == job && l["key_name"] == "laptop" && l["method"] == "POST" && l["status"] == float64(200) {
			withJob = true
		}
	}
	if limited != 35 || !withJob {
		t.Fatalf("audit: %d limited lines (want 35), the execution's line found: %v", limited, withJob)
	}
	if fi, _ := os.Stat(audit); fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit.jsonl mode %v", fi.Mode().Perm())
	}
}

// A client that never finishes its request headers, or its body, is cut
// by the server's timeouts; meanwhile everyone else is served.
func TestHTTPSlowClient(t *testing.T) {
	t.Parallel()
	_, base, key := httpDaemon(t, "")
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/api/v1")
	headers, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer headers.Close()
	fmt.Fprintf(headers, "GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")
	body, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	fmt.Fprintf(body, "PUT /api/v1/context/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"value\":", key)
	if a := httpDo(t, "GET", base+"/status", key, ""); a.status != 200 {
		t.Fatalf("status beside the slow clients: %d", a.status)
	}
	headers.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if n, err := io.Copy(io.Discard, headers); err != nil {
		t.Fatalf("the stalled headers were not cut: %v (%d bytes)", err, n)
	}
	body.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(body), nil)
	if err != nil {
		t.Fatalf("the stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "not sent within") {
		t.Fatalf("the stalled body: %d %s", resp.StatusCode, b)
	}
}

// 1,000 streams at once: every one gets its own output, then exit.
func TestHTTPManyStreams(t *testing.T) {
	underRace(t)
	t.Parallel()
	const n = 1000
	// The lane's default heartbeat timeout (5 s), not fastConfig's 1 s: a
	// thousand requests at once on a loaded machine can starve a runner
	// for a second, and its jobs would then fail as runner_lost, rightly.
	cfg := strings.Replace(fastConfig, "heartbeat_timeout = \"1s\"", "heartbeat_timeout = \"5s\"", 1)
	d, base, key := httpDaemonAt(t, shortTemp(t), cfg, "max_concurrent = 1000\n[http.rate_limits]\nexec = 0\n")
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	failedJobs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/execute/stream", strings.NewReader(fmt.Sprintf(`{"command":"echo","args":["stream-%d"]}`, i)))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				errs <- fmt.Errorf("stream %d: %d %s", i, resp.StatusCode, b)
				return
			}
			evs, err := parseSSE(resp.Body)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
				return
			}
			var out strings.Builder
			for _, e := range evs {
				if e.Type == "stdout" {
					out.WriteString(e.Data)
				}
			}
			if len(evs) == 0 || evs[len(evs)-1].Type != "exit" || evs[len(evs)-1].Data != "0" || out.String() != fmt.Sprintf("stream-%d\n", i) {
				errs <- fmt.Errorf("stream %d: %q then %+v", i, out.String(), evs)
				failedJobs <- evs[len(evs)-1].JobID
			}
		}()
	}
	wg.Wait()
	close(errs)
	bad := 0
	for err := range errs {
		if bad++; bad <= 5 {
			t.Error(err)
		}
	}
	if bad > 0 {
		close(failedJobs)
		for id := range failedJobs {
			for _, e := range d.events() {
				if e["job_id"] == id && e["kind"] == "job.finished" {
					t.Logf("job %s: %v", id, e)
				}
			}
		}
		t.Fatalf("%d of %d streams failed", bad, n)
	}
}

// parseSSE reads a stream's events to its end; safe from any goroutine.
func parseSSE(body io.Reader) ([]sseEvent, error) {
	var out []sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e sseEvent
			if err := jsonUnmarshal([]byte(l), &e); err != nil {
				return out, fmt.Errorf("event %q: %w", l, err)
			}
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// orchestrd peers and run --peer, as a user types them: one daemon runs a
// job on another's lanes (which lists its key), streams its output, exits
// with its code; a denied command, a timeout and Ctrl-C say what happened.
func TestHTTPRunPeer(t *testing.T) {
	t.Parallel()
	local, _, localKey := httpDaemon(t, "")
	remote, remoteBase, _ := httpDaemon(t, "[http.allowed_keys]\nlaptop = \""+localKey+"\"\n")
	addr := strings.TrimSuffix(strings.TrimPrefix(remoteBase, "http://"), "/api/v1")
	if out, errOut, code := runCLI(t, "peers", "--home", local.home); code != 0 || !strings.Contains(out, "no peers") {
		t.Fatalf("peers: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, "peers", "add", addr, "--node-id", "build-box", "--home", local.home); code != 0 || !strings.Contains(out, "added build-box") {
		t.Fatalf("peers add: %d %q %q", code, out, errOut)
	}
	if out, _, code := runCLI(t, "peers", "--home", local.home); code != 0 || !strings.Contains(out, "build-box") || !strings.Contains(out, addr) {
		t.Fatalf("peers: %d %q", code, out)
	}
	out, errOut, code := runCLI(t, "run", "--home", local.home, "--peer", "build", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || out != "out\n" || errOut != "err\n" {
		t.Fatalf("run --peer: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	remote.waitEvent("http.exec_started", func(e map[string]any) bool { return e["key_name"] == "laptop" && e["command"] == "sh" })
	if _, errOut, code := runCLI(t, "run", "--home", local.home, "--peer", "build-box", "--", "rm", "-rf", "/nothing"); code != 1 ||
		!strings.Contains(errOut, "Command 'rm' is denied (code 3001)") {
		t.Fatalf("a denied command: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "run", "--home", local.home, "--peer", "build-box", "--timeout", "0.2", "--", "sleep", "30"); code != exitTimeout ||
		!strings.Contains(errOut, "timed out") {
		t.Fatalf("a timeout: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "run", "--home", local.home, "--peer", "nobody", "--", "true"); code != 1 || !strings.Contains(errOut, `no peer "nobody"; known: build-box`) {
		t.Fatalf("an unknown peer: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "run", "--home", local.home, "--peer", "build-box", "--lane", "net", "--", "true"); code != exitUsage || !strings.Contains(errOut, "--lane") {
		t.Fatalf("--lane with --peer: exit %d, %q", code, errOut)
	}

	// Ctrl-C cancels the job on the peer.
	cmd := exec.Command(binary, "run", "--home", local.home, "--peer", "build-box", "--", "sh", "-c", "echo started; exec sleep 60")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "started\n" {
		t.Fatalf("first line %q: %v", l, err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitCancelled || !strings.Contains(stderr.String(), "was cancelled") {
		t.Fatalf("run --peer after SIGINT: %v, %q", err, stderr.String())
	}
	e := remote.waitEvent("http.exec_cancelled", func(e map[string]any) bool { return e["key_name"] == "laptop" })
	if f := remote.waitEvent("job.finished", func(f map[string]any) bool { return f["job_id"] == e["job_id"] }); f["state"] != "cancelled" {
		t.Fatalf("the peer's job: %v", f)
	}

	if out, _, code := runCLI(t, "peers", "rm", "build-box", "--home", local.home); code != 0 || !strings.Contains(out, "removed build-box") {
		t.Fatalf("peers rm: %d %q", code, out)
	}
	if _, errOut, code := runCLI(t, "peers", "rm", "build-box", "--home", local.home); code != 1 || !strings.Contains(errOut, "code 2001") {
		t.Fatalf("peers rm again: %d %q", code, errOut)
	}
}

// mDNS: two daemons with discovery on announce _loopsy._tcp and find each
// other as peers.
func TestHTTPDiscovery(t *testing.T) {
	t.Parallel()
	cfg := "discovery = true\n[http.peers]\ndiscovery_interval = \"200ms\"\n"
	a, baseA, keyA := httpDaemon(t, cfg)
	b, baseB, keyB := httpDaemon(t, cfg+"[http.allowed_keys]\na = \""+keyA+"\"\n")
	for _, d := range []*testDaemon{a, b} {
		var e map[string]any
		eventually(t, 20*time.Second, "discovery started or unavailable", func() bool {
			for _, ev := range d.events() {
				if ev["kind"] == "http.discovery_started" || ev["kind"] == "http.discovery_unavailable" {
					e = ev
					return true
				}
			}
			return false
		})
		if e["kind"] == "http.discovery_unavailable" {
			t.Skipf("no mDNS on this machine: %v", e["error"])
		}
	}
	idA := httpDo(t, "GET", baseA+"/identity", keyA, "").body["nodeId"].(string)
	idB := httpDo(t, "GET", baseB+"/identity", keyB, "").body["nodeId"].(string)
	_, portB, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(baseB, "http://"), "/api/v1"))
	a.waitEventWithin(60*time.Second, "http.peer_added", func(e map[string]any) bool { return e["node_id"] == idB && e["source"] == "mdns" })
	b.waitEventWithin(60*time.Second, "http.peer_added", func(e map[string]any) bool { return e["node_id"] == idA && e["source"] == "mdns" })
	l := httpDo(t, "GET", baseA+"/peers", keyA, "")
	if !strings.Contains(l.raw, `"nodeId":"`+idB+`"`) || !strings.Contains(l.raw, `"port":`+portB) || !strings.Contains(l.raw, `"status":"online"`) ||
		!strings.Contains(l.raw, `"source":"mdns"`) {
		t.Fatalf("a's peers: %s", l.raw)
	}

	// a's own key is not sent to a peer only mDNS vouches for; once a
	// person adds it (same node id), it is, and b (which lists a's key)
	// runs the job.
	if _, errOut, code := runCLI(t, "run", "--home", a.home, "--peer", idB, "--", "echo", "hi"); code != 1 || !strings.Contains(errOut, "found by mDNS only") {
		t.Fatalf("run on an mDNS-only peer: exit %d, %q", code, errOut)
	}
	for _, e := range b.events() {
		if e["kind"] == "http.auth_failed" || e["kind"] == "http.exec_started" {
			t.Fatalf("b was called: %v", e)
		}
	}
	mustCLI(t, "peers", "add", "127.0.0.1:"+portB, "--node-id", idB, "--home", a.home)
	if l := httpDo(t, "GET", baseA+"/peers", keyA, ""); !strings.Contains(l.raw, `"manuallyAdded":true,"source":"manual"`) {
		t.Fatalf("a's peers after the add: %s", l.raw)
	}
	if out, errOut, code := runCLI(t, "run", "--home", a.home, "--peer", idB, "--", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("run on the added peer: exit %d, %q %q", code, out, errOut)
	}
}

// [http] cert and key serve HTTPS; the listening event says tls.
func TestHTTPTLS(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	pool := selfSigned(t, certFile, keyFile)
	d := startDaemon(t, fastConfig+fmt.Sprintf("\n[http]\nlisten = \"127.0.0.1:0\"\ncert = %q\nkey = %q\n", certFile, keyFile))
	e := d.waitEvent("http.listening", nil)
	if e["tls"] != true {
		t.Fatalf("listening: %v", e)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + e["addr"].(string) + "/api/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("https health: %d", resp.StatusCode)
	}
	if r, err := http.Get("http://" + e["addr"].(string) + "/api/v1/health"); err == nil {
		r.Body.Close()
		if r.StatusCode == 200 {
			t.Fatal("plain HTTP was served on the TLS port")
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns a
// pool that trusts it.
func selfSigned(t *testing.T, certFile, keyFile string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "orchestrd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}
