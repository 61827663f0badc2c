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

// The stdin_stream extension is written only when set, and orchestrd's
// extension frames round-trip as encoding/json writes them.
func TestStreamExtensions(t *testing.T) {
	j := Job{JobID: "j-1", Argv: []string{"cat"}, StdinStream: true}
	frame, err := Marshal(TypeJob, j)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(frame, []byte(`"file_paths":[],"stdin_stream":true}`)) {
		t.Fatalf("payload %s", frame[HeaderSize:])
	}
	var back Job
	if err := Unmarshal(Frame{Type: TypeJob, Payload: frame[HeaderSize:]}, &back); err != nil || !back.StdinStream {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	for _, tc := range []struct {
		t    MsgType
		v    any
		want string
	}{
		{TypeOutputAck, OutputAck{JobID: "j-1", Acked: 1 << 20}, `{"job_id":"j-1","acked":1048576}`},
		{TypeStdinChunk, StdinChunk{JobID: "j-1", Data: []byte("hi\n")}, `{"job_id":"j-1","data":"aGkK"}`},
		{TypeStdinChunk, StdinChunk{JobID: "j-1", Data: []byte{}, EOF: true}, `{"job_id":"j-1","data":"","eof":true}`},
		{TypeStdinAck, StdinAck{JobID: "j-1", Bytes: 3}, `{"job_id":"j-1","bytes":3}`},
		{TypeHandshakeAck, HandshakeAck{Accepted: true, Config: RunnerConfig{OutputWindow: 4}},
			`{"accepted":true,"slots":0,"config":{"lane":"","heartbeat_interval_ms":0,"max_frame_bytes":0,"output_window":4}}`},
	} {
		frame, err := Marshal(tc.t, tc.v)
		if err != nil || string(frame[HeaderSize:]) != tc.want || frame[4] != byte(tc.t) {
			t.Fatalf("%s: %s (%v), want %s", tc.t, frame[HeaderSize:], err, tc.want)
		}
	}
}

// A base64 OutputChunk decodes to the same chunk as the array form.
func TestOutputChunkBase64(t *testing.T) {
	c := OutputChunk{JobID: "j-1", Chunk: Bytes("ok \xff\x00\n"), Stream: Stderr}
	frame, err := MarshalOutputChunkBase64(&c)
	if err != nil {
		t.Fatal(err)
	}
	if string(frame[HeaderSize:]) != `{"job_id":"j-1","chunk":"b2sg/wAK","stream":"Stderr"}` || frame[4] != byte(TypeOutputChunk) {
		t.Fatalf("frame %q", frame)
	}
	fm, err := NewFrameReader(bytes.NewReader(frame), 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	var back OutputChunk
	if err := Unmarshal(fm, &back); err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("decoded %#v (%v)", back, err)
	}
}
