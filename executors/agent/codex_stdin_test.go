package agent

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/internal/modelfake"
)

// An approved interactive program does not approve what the model types
// into it next (Codex does not ask before write_stdin): no command runs on
// a terminal, so none reads what the model would type.
func TestCodexStdinNotTyped(t *testing.T) {
	sessRe := regexp.MustCompile(`session ID (\d+)`)
	e := newCodexEnv(t,
		modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "exec_command",
			Args: map[string]any{"cmd": "cat", "login": false, "tty": true, "yield_time_ms": 500}}}},
		modelfake.OpenAITurn{Func: func(r modelfake.OpenAIRequest) modelfake.OpenAITurn {
			id := 0
			if m := sessRe.FindStringSubmatch(r.LastOutput()); m != nil {
				id, _ = strconv.Atoi(m[1])
			}
			return modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "write_stdin",
				Args: map[string]any{"session_id": id, "chars": "typed-in\n", "yield_time_ms": 500}}}}
		}},
		modelfake.OpenAITurn{Text: "ok"})
	h := &testHost{key: "k", decide: func(tool string, in json.RawMessage) Decision { return Decision{Approved: true} }}
	res := e.run(t, h, nil)
	if res.Status != "completed" {
		t.Fatalf("result %+v %+v", res, res.Error)
	}
	reqs := e.fake.Conversation()
	if len(reqs) != 3 {
		t.Fatalf("%d requests (a request sent again counted once)", len(reqs))
	}
	if out := reqs[1].LastOutput(); !strings.Contains(out, "TTY execution is disabled") {
		t.Errorf("the terminal command's result: %q", out)
	}
	if out := reqs[2].LastOutput(); strings.Contains(out, "typed-in") {
		t.Errorf("what the model typed reached a program: %q", out)
	}
}
