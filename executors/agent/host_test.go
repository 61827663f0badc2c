package agent

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"

	"github.com/orchestrd/orchestrd/api"
)

// testHost is the Host every adapter test runs with: it keeps what the
// adapter reports (each message must encode, as the executor's would),
// the tools it asked about and the services it asked a key for; it
// answers a permission with decide (nil: denied) and a key with key
// ("": none; noKey: a refusal that is not "none").
type testHost struct {
	mu      sync.Mutex
	msgs    []claudeMsg
	errs    []string
	asked   []string // tool + " " + input
	keyAsks []string
	decide  func(tool string, input json.RawMessage) Decision
	key     string
	noKey   bool
}

func (h *testHost) Report(typ string, data any) {
	if _, err := json.Marshal(data); err != nil {
		panic("a " + typ + " message does not encode: " + err.Error())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, claudeMsg{typ, data})
}

func (h *testHost) ReportError(code, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, code+": "+message)
}

func (h *testHost) Permission(tool string, input json.RawMessage) (Decision, error) {
	h.mu.Lock()
	h.asked = append(h.asked, tool+" "+string(input))
	d := h.decide
	h.mu.Unlock()
	if d == nil {
		return Decision{Reason: "no decider"}, nil
	}
	return d(tool, input), nil
}

func (h *testHost) APIKey(service string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keyAsks = append(h.keyAsks, service)
	switch {
	case h.noKey:
		return "", errors.New("refused")
	case h.key == "":
		return "", os.ErrNotExist
	}
	return h.key, nil
}

// of is the messages of type typ, as the wire carries them.
func (h *testHost) of(typ string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, m := range h.msgs {
		if m.Type == typ {
			b, _ := json.Marshal(m.Data)
			var v map[string]any
			_ = json.Unmarshal(b, &v)
			out = append(out, v)
		}
	}
	return out
}

// texts is the text messages' text, joined.
func (h *testHost) texts() string {
	var b strings.Builder
	for _, m := range h.of(api.MsgText) {
		b.WriteString(m["text"].(string))
	}
	return b.String()
}

// tools is the names of the tools asked about, in order.
func (h *testHost) tools() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, a := range h.asked {
		name, _, _ := strings.Cut(a, " ")
		out = append(out, name)
	}
	return out
}
