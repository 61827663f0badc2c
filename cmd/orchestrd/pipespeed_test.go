package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// A job's output at full speed goes into buffers the daemon and the client
// reuse (the daemon's chunks once every reader has taken them, the client's
// pieces once written): every byte must still arrive at its offset. One job
// whose every line differs (seq) is followed by three logs -f: one read at
// full speed, one slowly, one killed part way (its reader closed while it
// held a piece); a run of the same command goes into a file meanwhile. Each
// that stays gets the job's output exactly, and exit 0.
func TestFollowersGetEveryByteAtItsOffset(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, streamConfig)
	dir := shortTemp(t)
	const lines = 1500000 // about 11 MB
	seq, err := exec.Command("seq", "1", strconv.Itoa(lines)).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("ready\n"), seq...)
	gate := filepath.Join(dir, "gate")
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sh", "-c",
		`echo ready; while [ ! -e "$1" ]; do sleep 0.02; done; seq 1 "$2"`, "sh", gate, strconv.Itoa(lines)}})

	type follower struct {
		cmd *exec.Cmd
		out *bufio.Reader
		err interface{ String() string }
	}
	follow := func() follower {
		cmd := runCmd(t, "logs", "--home", d.home, "-f", id)
		stdout, errOut := startPiped(t, cmd)
		br := bufio.NewReaderSize(stdout, 64<<10)
		// Its first line: it is attached, and follows from here.
		if l, err := br.ReadString('\n'); l != "ready\n" || err != nil {
			t.Fatalf("logs -f began %q (%v)", l, err)
		}
		return follower{cmd, br, errOut}
	}
	fast, slow, killed := follow(), follow(), follow()
	type got struct {
		b    []byte
		code int
		err  string
	}
	read := func(f follower, pace time.Duration) <-chan got {
		ch := make(chan got, 1)
		go func() {
			b := []byte("ready\n")
			buf := make([]byte, 16<<10)
			for {
				n, err := f.out.Read(buf)
				b = append(b, buf[:n]...)
				if err != nil {
					break
				}
				if pace > 0 {
					time.Sleep(pace) // pace, not correctness: any pace gets every byte
				}
			}
			code := exitCode(t, f.cmd.Wait())
			ch <- got{b, code, f.err.String()}
		}()
		return ch
	}
	fastGot, slowGot := read(fast, 0), read(slow, time.Millisecond)

	runOutFile := filepath.Join(dir, "run.out")
	out, err := os.Create(runOutFile)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	run := runCmd(t, "run", "--home", d.home, "--lane", "net", "--no-stdin", "--", "seq", "1", strconv.Itoa(lines))
	run.Stdout = out
	var runErr bytes.Buffer
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The third reads a little, then dies without a word.
	if _, err := io.ReadFull(killed.out, make([]byte, 1<<20)); err != nil {
		t.Fatalf("logs -f to be killed: %v (stderr %q)", err, killed.err.String())
	}
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.cmd.Wait()

	for name, ch := range map[string]<-chan got{"fast": fastGot, "slow": slowGot} {
		g := <-ch
		if g.code != 0 || !bytes.Equal(g.b, want) || g.err != "" {
			t.Fatalf("logs -f (%s): exit %d, stdout %s, stderr %q", name, g.code, firstDiff(g.b, want), g.err)
		}
	}
	code := exitCode(t, run.Wait())
	b, err := os.ReadFile(runOutFile)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(b, seq) || runErr.Len() != 0 {
		t.Fatalf("run > file: exit %d, stdout %s, stderr %q", code, firstDiff(b, seq), runErr.String())
	}
}

// /execute/stream with Accept: application/vnd.orchestrd.exec-stream sends
// the job's output as binary frames, every byte at its offset, stdout and
// stderr apart, then the exit frame; a client that goes away part way
// cancels its job, as an event stream's does.
func TestHTTPStreamBinaryFrames(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemonAt(t, shortTemp(t), bytesConfig, "")
	const lines = 1000000 // about 6.9 MB, each line its own
	seq, err := exec.Command("seq", "1", strconv.Itoa(lines)).Output()
	if err != nil {
		t.Fatal(err)
	}
	post := func(ctx context.Context, body string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/execute/stream", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Accept", "text/event-stream;q=0.5, "+wire.ExecStreamType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != wire.ExecStreamType {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		return resp
	}
	resp := post(context.Background(), fmt.Sprintf(`{"command":"sh","args":["-c","seq 1 %d; echo oops >&2; exit 3"]}`, lines))
	defer resp.Body.Close()
	fr := wire.NewExecFrameReader(resp.Body, 1<<20)
	var stdout, stderr []byte
	var exit map[string]any
	for exit == nil {
		kind, p, err := fr.Next()
		if err != nil {
			t.Fatalf("after %d bytes of stdout: %v", len(stdout), err)
		}
		switch kind {
		case wire.ExecStdout:
			stdout = append(stdout, p...)
		case wire.ExecStderr:
			stderr = append(stderr, p...)
		case wire.ExecExit:
			if err := json.Unmarshal(p, &exit); err != nil {
				t.Fatalf("exit frame %q: %v", p, err)
			}
		default:
			t.Fatalf("frame %q %q", kind, p)
		}
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("after the exit frame: %v", err)
	}
	if !bytes.Equal(stdout, seq) || string(stderr) != "oops\n" || exit["type"] != "exit" || exit["data"] != "3" {
		t.Fatalf("stdout %s, stderr %q, exit %v", firstDiff(stdout, seq), stderr, exit)
	}

	// Gone part way: the job is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp = post(ctx, `{"command":"sh","args":["-c","seq 1 100000000"]}`)
	id := resp.Header.Get("X-Loopsy-Job-Id")
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	if rec := d.wait(id); rec.State != api.StateCancelled {
		t.Fatalf("job %s of a client gone ended %s, want cancelled", id, rec.State)
	}
}
