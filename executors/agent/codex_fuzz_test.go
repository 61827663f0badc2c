package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// FuzzCodexLine feeds the adapter lines of Codex's app-server (seeded with
// lines the real Codex 0.169.0 printed): it never panics, every message it
// reports is JSON (a bad raw line would fail Report's marshalling), and
// what it writes back to Codex is JSON lines.
func FuzzCodexLine(f *testing.F) {
	seeds, err := os.ReadFile("testdata/codex-lines.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	for _, l := range bytes.Split(seeds, []byte("\n")) {
		if len(l) > 0 {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"id":"x","method":"item/commandExecution/requestApproval","params":{"command":"/bin/bash -lc 'a'\u0000"}}`))
	f.Add([]byte(`{"method":"thread/tokenUsage/updated","params":{"tokenUsage":{"total":{"inputTokens":-5},"last":{"inputTokens":9e99}}}}`))
	f.Add([]byte("\xff\xfe{not json"))
	f.Fuzz(func(t *testing.T, line []byte) {
		h := &testHost{decide: func(string, json.RawMessage) Decision { return Decision{Reason: "no"} }}
		w := &testio.SyncBuffer{} // what the adapter writes to Codex
		r := newCodexRun(Task{PermissionMode: api.ModeDefault}, h, w)
		r.read(bytes.NewReader(line))
		r.approvals.Wait()
		_, _ = envelopeHead(line)
		for _, out := range strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n") {
			if out != "" && !json.Valid([]byte(out)) {
				t.Fatalf("wrote a line that is not JSON: %q", out)
			}
		}
		_ = r.usage()
	})
}

// A Codex request over LineMax (an approval of a huge command) is refused
// and answered with a decline, not left waiting.
func TestCodexLineTooLong(t *testing.T) {
	huge := strings.Repeat("x", LineMax+10)
	line := `{"method":"item/commandExecution/requestApproval","id":7,"params":{"command":"` + huge + `"}}` + "\n" +
		`{"method":"item/agentMessage/delta","params":{"delta":"after"}}` + "\n"
	h := &testHost{decide: func(string, json.RawMessage) Decision { return Decision{Approved: true} }}
	w := &testio.SyncBuffer{} // what the adapter writes to Codex
	r := newCodexRun(Task{}, h, w)
	r.read(bufio.NewReader(strings.NewReader(line)))
	r.approvals.Wait()
	if got := w.String(); !strings.Contains(got, `"id":7`) || !strings.Contains(got, `"decision":"decline"`) {
		t.Errorf("answer %q", got)
	}
	if len(h.asked) != 0 {
		t.Errorf("asked %q", h.asked)
	}
	if h.texts() != "after" || r.deniedCount() != 1 || len(h.errs) != 1 {
		t.Errorf("texts %q denied %d errors %q", h.texts(), r.deniedCount(), h.errs)
	}
}
