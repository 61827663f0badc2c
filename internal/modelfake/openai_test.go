package modelfake

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// post sends a Responses request with the given input items and returns
// the HTTP status and, for a stream, the names of the calls and the text
// the answer carries.
func post(t *testing.T, o *OpenAI, input ...string) (int, string) {
	t.Helper()
	body := `{"model":"m","input":[` + strings.Join(input, ",") + `]}`
	resp, err := http.Post(o.URL+"/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type    string `json:"type"`
				Name    string `json:"name"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"item"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "response.output_item.done" {
			continue
		}
		switch ev.Item.Type {
		case "function_call":
			got = append(got, "call:"+ev.Item.Name)
		case "message":
			for _, c := range ev.Item.Content {
				got = append(got, c.Text)
			}
		}
	}
	return resp.StatusCode, strings.Join(got, " ")
}

// A request is answered by the turn for its place in the conversation: a
// request sent again (Codex retries one whose stream it lost) gets the
// same answer, not the next turn; error turns go one request at a time;
// other items of the client's neither start nor end an answer.
func TestOpenAITurnsByPosition(t *testing.T) {
	o, err := NewOpenAI(
		OpenAITurn{Status: 429}, // position 0, first request
		OpenAITurn{Calls: []OpenAICall{{Name: "one", Args: map[string]any{}}}},
		OpenAITurn{Text: "middle", Calls: []OpenAICall{{Name: "two", Args: map[string]any{}}}},
		OpenAITurn{Status: 500},
		OpenAITurn{Status: 503},
		OpenAITurn{Text: "last"})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	user := `{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`
	call1 := `{"type":"function_call","name":"one","call_id":"a","arguments":"{}"}`
	out1 := `{"type":"function_call_output","call_id":"a","output":"ok"}`
	msg := `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"middle"}]}`
	note := `{"type":"ghost_snapshot"}`
	call2 := `{"type":"function_call","name":"two","call_id":"b","arguments":"{}"}`
	out2 := `{"type":"function_call_output","call_id":"b","output":"ok"}`
	steps := []struct {
		input  []string
		status int
		answer string
	}{
		{[]string{user}, 429, ""},
		{[]string{user}, 200, "call:one"},
		{[]string{user}, 200, "call:one"}, // sent again
		{[]string{user, call1, out1}, 200, "middle call:two"},
		{[]string{user, call1, out1, msg, note, call2, out2}, 500, ""},
		{[]string{user, call1, out1, msg, call2, out2}, 503, ""},
		{[]string{user, call1, out1, msg, call2, out2}, 200, "last"},
		{[]string{user, call1, out1, msg, call2, out2}, 200, "last"}, // sent again
		{[]string{user, call1, out1, msg, call2, out2, `{"type":"message","role":"assistant","content":[]}`, user}, 200, "(no more turns)"},
	}
	for i, s := range steps {
		if status, answer := post(t, o, s.input...); status != s.status || answer != s.answer {
			t.Fatalf("request %d: %d %q, want %d %q", i, status, answer, s.status, s.answer)
		}
	}
	conv := o.Conversation()
	if len(conv) != 4 || conv[1].Position != 1 || len(conv[2].Input) != 6 || len(o.Requests()) != len(steps) {
		t.Fatalf("conversation of %d requests (%d in all)", len(conv), len(o.Requests()))
	}
}
