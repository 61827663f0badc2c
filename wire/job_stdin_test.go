package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// A Job without stdin is the spec's ToolJob byte for byte (a Loopr runner
// sees exactly the frame it always did); with stdin it carries stdin_b64,
// and both forms decode back to what was sent.
func TestJobStdinExtension(t *testing.T) {
	base := Job{JobID: "j-1", Argv: []string{"cat"}, Cwd: "/w"}
	const plain = `{"job_id":"j-1","agent_id":"","tool_name":"","command":"","argv":["cat"],"cwd":"/w","worktree_dir":"","env":{},"timeout_ms":0,"max_output_bytes":0,"file_paths":[]}`
	for _, tc := range []struct {
		name  string
		stdin []byte
		want  string
	}{
		{"none", nil, plain},
		{"empty", []byte{}, plain},
		{"text", []byte("hi\n"), plain[:len(plain)-1] + `,"stdin_b64":"aGkK"}`},
		{"binary", []byte{0, 0xff, 0xfe, '\n'}, plain[:len(plain)-1] + `,"stdin_b64":"AP/+Cg=="}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := base
			j.Stdin = tc.stdin
			frame, err := Marshal(TypeJob, j)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(frame[HeaderSize:]); got != tc.want {
				t.Fatalf("payload\n got %s\nwant %s", got, tc.want)
			}
			ref, err := reflectJSON(j)
			if err != nil || !bytes.Equal(ref, frame[HeaderSize:]) {
				t.Fatalf("encoding/json writes %s (%v)", ref, err)
			}
			var back Job
			if err := Unmarshal(Frame{Type: TypeJob, Payload: frame[HeaderSize:]}, &back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Stdin, tc.stdin) {
				t.Fatalf("stdin decoded as %q, sent %q", back.Stdin, tc.stdin)
			}
		})
	}
	// A runner that does not know the field (Loopr's, an older orchestrd)
	// decodes the rest unchanged.
	j := base
	j.Stdin = []byte("input")
	b, _ := json.Marshal(j)
	type specJob struct {
		JobID string   `json:"job_id"`
		Argv  []string `json:"argv"`
		Cwd   string   `json:"cwd"`
	}
	var old specJob
	if err := json.Unmarshal(b, &old); err != nil || !reflect.DeepEqual(old, specJob{"j-1", []string{"cat"}, "/w"}) {
		t.Fatalf("a peer without the field reads %+v (%v)", old, err)
	}
}
