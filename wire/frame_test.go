package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func ptr[T any](v T) *T { return &v }

// message is one value of every frame type, with its exact wire payload.
type message struct {
	name    string
	t       MsgType
	v       any        // value to encode
	newV    func() any // pointer to a zero value of the same type
	payload string     // exact JSON the value encodes to
}

func allMessages() []message {
	return []message{
		{"Handshake", TypeHandshake,
			Handshake{Lane: "no-net", Pid: 4242, Version: "0.3.1", Capabilities: []string{"bash", "fs"}},
			func() any { return new(Handshake) },
			`{"lane":"no-net","pid":4242,"version":"0.3.1","capabilities":["bash","fs"]}`},
		{"HandshakeAck", TypeHandshakeAck,
			HandshakeAck{Accepted: true, Slots: 4, Config: RunnerConfig{Lane: "net", HeartbeatIntervalMs: 1000, MaxFrameBytes: 1 << 20}},
			func() any { return new(HandshakeAck) },
			`{"accepted":true,"slots":4,"config":{"lane":"net","heartbeat_interval_ms":1000,"max_frame_bytes":1048576}}`},
		{"HandshakeAckRejected", TypeHandshakeAck,
			HandshakeAck{Accepted: false, Config: RunnerConfig{Lane: "heavy", Reason: "lane full"}},
			func() any { return new(HandshakeAck) },
			`{"accepted":false,"slots":0,"config":{"lane":"heavy","heartbeat_interval_ms":0,"max_frame_bytes":0,"reason":"lane full"}}`},
		{"Job", TypeJob,
			Job{JobID: "job-1", AgentID: "agent-1", ToolName: "bash", Command: "ls -l", Argv: []string{"ls", "-l"},
				Cwd: "/w", WorktreeDir: "/w/.wt", Env: map[string]string{"A": "1", "B": "2"}, TimeoutMs: 30000,
				MaxOutputBytes: 65536, FilePaths: []string{"/w/a.go"}},
			func() any { return new(Job) },
			`{"job_id":"job-1","agent_id":"agent-1","tool_name":"bash","command":"ls -l","argv":["ls","-l"],"cwd":"/w","worktree_dir":"/w/.wt","env":{"A":"1","B":"2"},"timeout_ms":30000,"max_output_bytes":65536,"file_paths":["/w/a.go"]}`},
		{"JobAck", TypeJobAck, JobAck{JobID: "job-1", Accepted: true},
			func() any { return new(JobAck) }, `{"job_id":"job-1","accepted":true}`},
		{"JobAckError", TypeJobAck, JobAck{JobID: "job-1", Error: ptr("path outside worktree")},
			func() any { return new(JobAck) }, `{"job_id":"job-1","accepted":false,"error":"path outside worktree"}`},
		{"Result", TypeResult,
			Result{JobID: "job-1", Status: StatusFailed, Output: "boom\n", ExitCode: ptr[int32](2), DurationMs: 15},
			func() any { return new(Result) },
			`{"job_id":"job-1","status":"Failed","output":"boom\n","exit_code":2,"was_timeout":false,"was_cancelled":false,"duration_ms":15}`},
		{"ResultTimeout", TypeResult,
			Result{JobID: "job-2", Status: StatusTimeout, WasTimeout: true, DurationMs: 30000},
			func() any { return new(Result) },
			`{"job_id":"job-2","status":"Timeout","output":"","exit_code":null,"was_timeout":true,"was_cancelled":false,"duration_ms":30000}`},
		{"ResultSignal", TypeResult,
			Result{JobID: "job-3", Status: StatusFailed, DurationMs: 4, Signal: "SIGSEGV"},
			func() any { return new(Result) },
			`{"job_id":"job-3","status":"Failed","output":"","exit_code":null,"was_timeout":false,"was_cancelled":false,"duration_ms":4,"signal":"SIGSEGV"}`},
		{"Cancel", TypeCancel, Cancel{JobID: "job-1"},
			func() any { return new(Cancel) }, `{"job_id":"job-1"}`},
		{"CancelAck", TypeCancelAck, CancelAck{JobID: "job-1", WasRunning: true},
			func() any { return new(CancelAck) }, `{"job_id":"job-1","was_running":true}`},
		{"OutputChunk", TypeOutputChunk, OutputChunk{JobID: "job-1", Chunk: Bytes("hi\n"), Stream: Stderr},
			func() any { return new(OutputChunk) }, `{"job_id":"job-1","chunk":[104,105,10],"stream":"Stderr"}`},
		{"Heartbeat", TypeHeartbeat, Heartbeat{ActiveJobs: 2, UptimeSecs: 3600, MemoryBytes: 1 << 30},
			func() any { return new(Heartbeat) }, `{"active_jobs":2,"uptime_secs":3600,"memory_bytes":1073741824}`},
		{"HeartbeatAck", TypeHeartbeatAck, HeartbeatAck{Timestamp: 1769731200000},
			func() any { return new(HeartbeatAck) }, `{"timestamp":1769731200000}`},
		{"Shutdown", TypeShutdown, Shutdown{},
			func() any { return new(Shutdown) }, `{}`},
	}
}

func TestFrameRoundTripEveryType(t *testing.T) {
	for _, m := range allMessages() {
		t.Run(m.name, func(t *testing.T) {
			frame, err := Marshal(m.t, m.v)
			if err != nil {
				t.Fatal(err)
			}
			wantHdr := binary.BigEndian.AppendUint32(nil, uint32(len(m.payload)))
			wantHdr = append(wantHdr, byte(m.t))
			if !bytes.Equal(frame[:HeaderSize], wantHdr) {
				t.Fatalf("header = % x, want % x", frame[:HeaderSize], wantHdr)
			}
			if got := string(frame[HeaderSize:]); got != m.payload {
				t.Fatalf("payload\n got %s\nwant %s", got, m.payload)
			}
			// The same through a pointer, and through WriteFrame.
			pv := reflect.New(reflect.TypeOf(m.v))
			pv.Elem().Set(reflect.ValueOf(m.v))
			frame2, err := Marshal(m.t, pv.Interface())
			if err != nil || !bytes.Equal(frame2, frame) {
				t.Fatalf("Marshal(&v) = %q, %v; want %q", frame2, err, frame)
			}
			var w bytes.Buffer
			if err := WriteFrame(&w, m.t, m.v); err != nil || !bytes.Equal(w.Bytes(), frame) {
				t.Fatalf("WriteFrame wrote %q, %v; want %q", w.Bytes(), err, frame)
			}

			fr := NewFrameReader(bytes.NewReader(frame), 0)
			f, err := fr.Next()
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != m.t || string(f.Payload) != m.payload {
				t.Fatalf("read %v %q, want %v %q", f.Type, f.Payload, m.t, m.payload)
			}
			got := m.newV()
			if err := Unmarshal(f, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(reflect.ValueOf(got).Elem().Interface(), m.v) {
				t.Fatalf("decoded %#v, want %#v", got, m.v)
			}
			if _, err := fr.Next(); err != io.EOF {
				t.Fatalf("after the only frame: err = %v, want io.EOF", err)
			}
		})
	}
}

// Payloads as a serde peer writes them decode to the expected values.
func TestDecodeSerdePayloads(t *testing.T) {
	tests := []struct {
		name    string
		t       MsgType
		payload string
		want    any
	}{
		{"Handshake", TypeHandshake, `{"lane":"heavy","pid":77,"version":"1.0.0","capabilities":[]}`,
			&Handshake{Lane: "heavy", Pid: 77, Version: "1.0.0", Capabilities: []string{}}},
		{"ResultNoExitCode", TypeResult, `{"job_id":"j","status":"Cancelled","output":"","exit_code":null,"was_timeout":false,"was_cancelled":true,"duration_ms":3}`,
			&Result{JobID: "j", Status: StatusCancelled, WasCancelled: true, DurationMs: 3}},
		{"ResultError", TypeResult, `{"job_id":"j","status":"Error","output":"path violation","exit_code":null,"was_timeout":false,"was_cancelled":false,"duration_ms":0}`,
			&Result{JobID: "j", Status: StatusError, Output: "path violation"}},
		{"ResultSignal", TypeResult, `{"job_id":"j","status":"Failed","output":"","exit_code":null,"was_timeout":false,"was_cancelled":false,"duration_ms":2,"signal":"SIGKILL"}`,
			&Result{JobID: "j", Status: StatusFailed, DurationMs: 2, Signal: "SIGKILL"}},
		{"JobAckNoError", TypeJobAck, `{"job_id":"j","accepted":true}`, &JobAck{JobID: "j", Accepted: true}},
		{"OutputChunkArray", TypeOutputChunk, `{"job_id":"j","chunk":[104,105],"stream":"Stdout"}`,
			&OutputChunk{JobID: "j", Chunk: Bytes("hi"), Stream: Stdout}},
		{"OutputChunkPretty", TypeOutputChunk, "{\n  \"job_id\": \"j\",\n  \"chunk\": [\n    104,\n    105\n  ],\n  \"stream\": \"Stderr\"\n}",
			&OutputChunk{JobID: "j", Chunk: Bytes("hi"), Stream: Stderr}},
		{"OutputChunkBase64", TypeOutputChunk, `{"job_id":"j","chunk":"aGk=","stream":"Stdout"}`,
			&OutputChunk{JobID: "j", Chunk: Bytes("hi"), Stream: Stdout}},
		{"OutputChunkUnknownField", TypeOutputChunk, `{"job_id":"j","seq":9,"chunk":[],"stream":"Stdout"}`,
			&OutputChunk{JobID: "j", Chunk: Bytes{}, Stream: Stdout}},
		{"HeartbeatExtraField", TypeHeartbeat, `{"active_jobs":1,"uptime_secs":5,"memory_bytes":1024,"load":0.5}`,
			&Heartbeat{ActiveJobs: 1, UptimeSecs: 5, MemoryBytes: 1024}},
		{"ShutdownEmpty", TypeShutdown, ``, &Shutdown{}},
		{"ShutdownNull", TypeShutdown, `null`, &Shutdown{}},
		{"ShutdownGarbage", TypeShutdown, `bye`, &Shutdown{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := reflect.New(reflect.TypeOf(tc.want).Elem()).Interface()
			if err := Unmarshal(Frame{Type: tc.t, Payload: []byte(tc.payload)}, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name    string
		t       MsgType
		payload string
		v       any
		want    []string // substrings of the error
	}{
		{"BadStatus", TypeResult, `{"job_id":"j","status":"Crashed"}`, new(Result), []string{"decoding Result payload", `"Crashed"`}},
		{"BadStream", TypeOutputChunk, `{"job_id":"j","chunk":[],"stream":"Stdin"}`, new(OutputChunk), []string{"decoding OutputChunk payload", `"Stdin"`}},
		{"ChunkByte256", TypeOutputChunk, `{"job_id":"j","chunk":[1,256],"stream":"Stdout"}`, new(OutputChunk), []string{"byte 1 is 256", "outside 0..255"}},
		{"NotJSON", TypeJob, `{"job_id":`, new(Job), []string{"decoding Job payload"}},
		{"Empty", TypeHeartbeat, ``, new(Heartbeat), []string{"decoding Heartbeat payload"}},
		{"WrongType", TypeCancel, `{"job_id":5}`, new(Cancel), []string{"decoding Cancel payload"}},
		{"UnknownFrameType", MsgType(0x99), `[`, new(Cancel), []string{"decoding 0x99 payload"}},
		{"ResultNoStatus", TypeResult, `{"job_id":"j","output":"","exit_code":0}`, new(Result), []string{"decoding Result payload", "no status"}},
		{"ResultNullStatus", TypeResult, `{"job_id":"j","status":null}`, new(Result), []string{"exit status", "null"}},
		{"ResultNull", TypeResult, `null`, new(Result), []string{"no status"}},
		{"ChunkNoStream", TypeOutputChunk, `{"job_id":"j","chunk":[1]}`, new(OutputChunk), []string{"decoding OutputChunk payload", "no stream"}},
		{"ChunkNull", TypeOutputChunk, `null`, new(OutputChunk), []string{"no stream"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Unmarshal(Frame{Type: tc.t, Payload: []byte(tc.payload)}, tc.v)
			if err == nil {
				t.Fatalf("decoded %q without error into %#v", tc.payload, tc.v)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// The OutputChunk fast path must decide exactly as encoding/json would.
// A failed decode leaves the value as it was; a good one keeps fields the
// payload does not mention, as encoding/json does.
func TestResultDecodeKeepsValueOnError(t *testing.T) {
	r := Result{JobID: "keep", Status: StatusSuccess, DurationMs: 5}
	if err := json.Unmarshal([]byte(`{"job_id":"new","duration_ms":9}`), &r); err == nil {
		t.Fatal("decoded a result without a status")
	}
	if !reflect.DeepEqual(r, Result{JobID: "keep", Status: StatusSuccess, DurationMs: 5}) {
		t.Fatalf("failed decode changed the value to %+v", r)
	}
	if err := json.Unmarshal([]byte(`{"job_id":"new","status":"Error"}`), &r); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, Result{JobID: "new", Status: StatusError, DurationMs: 5}) {
		t.Fatalf("got %+v", r)
	}
	c := OutputChunk{JobID: "keep", Chunk: Bytes("x"), Stream: Stderr}
	if err := json.Unmarshal([]byte(`{"job_id":"new","chunk":[1]}`), &c); err == nil || c.JobID != "keep" || string(c.Chunk) != "x" {
		t.Fatalf("chunk without stream: %v, value now %+v", err, c)
	}
}

func TestOutputChunkFastPathMatchesEncodingJSON(t *testing.T) {
	payloads := []string{
		`{"job_id":"j","chunk":[1,2,3],"stream":"Stdout"}`,
		`{"stream":"Stderr","chunk":"AAEC","job_id":"j-2"}`,
		`{"job_id":"j","chunk":null,"stream":"Stdout"}`,
		`{"job_id":"j"}`,
		`{}`,
		` { } `,
		`{"job_id":"j","job_id":"k"}`,
		`{"JOB_ID":"upper","chunk":[]}`,
		`{"job_id":"caf\u00e9","chunk":[]}`,
		`{"job_id":"café","chunk":[]}`,
		`{"job_id":"j","chunk":[1,2,],"stream":"Stdout"}`,
		`{"job_id":"j","chunk":[300],"stream":"Stdout"}`,
		`{"job_id":"j","chunk":"!!","stream":"Stdout"}`,
		`{"job_id":"j","chunk":"\/\/\/\/","stream":"Stdout"}`,
		`{"job_id":"j","chunk":[1],"stream":"stdout"}`,
		`{"job_id":"j","chunk":[1],"stream":null}`,
		`{"job_id":"j","chunk":[1],"stream":"Stdout"} x`,
		`{"job_id":"j","chunk":[1],"stream":"Stdout"`,
		`{"job_id":"j",,"chunk":[1]}`,
		`{"job_id":1}`,
		`[]`,
		`null`,
		``,
	}
	for _, p := range payloads {
		prefill := OutputChunk{JobID: "old", Chunk: Bytes("old"), Stream: Stderr}
		fast, ref := prefill, prefill
		fast.Chunk = append(Bytes(nil), prefill.Chunk...)
		ref.Chunk = append(Bytes(nil), prefill.Chunk...)
		errFast := Unmarshal(Frame{Type: TypeOutputChunk, Payload: []byte(p)}, &fast)
		errRef := json.Unmarshal([]byte(p), &ref)
		if (errFast == nil) != (errRef == nil) {
			t.Errorf("%s: Unmarshal err = %v, json.Unmarshal err = %v", p, errFast, errRef)
			continue
		}
		if errFast == nil && !reflect.DeepEqual(fast, ref) {
			t.Errorf("%s: Unmarshal = %#v, json.Unmarshal = %#v", p, fast, ref)
		}
	}
}

func TestMarshalMatchesEncodingJSON(t *testing.T) {
	values := []any{
		OutputChunk{},
		OutputChunk{JobID: `<script>&"\` + "\u2028\x00\xff", Chunk: Bytes{0, 255}, Stream: "weird"},
		&OutputChunk{JobID: "j", Chunk: make(Bytes, 1000), Stream: Stdout},
		Job{},
		&Job{JobID: "<&>", Env: map[string]string{"Z": "1", "A": "2"}},
		benchJob(),
		Job{JobID: "j\u2028\xff", Argv: []string{"sh", "-c", `echo "$HOME" > /tmp/x && cat\n`}, TimeoutMs: 1<<64 - 1,
			Env:       map[string]string{"b": "1", "a": "<&>", "é": "x", "A": "y", "": "empty", "a\xff": "bad", "Ω": "\t"},
			FilePaths: []string{}},
		Job{Env: func() map[string]string { // more keys than the encoder's stack array
			m := map[string]string{}
			for i := range 40 {
				m[fmt.Sprintf("K%02d", 39-i)] = fmt.Sprint(i)
			}
			return m
		}()},
		Handshake{},
		&Handshake{Lane: "no-net", Pid: 1<<32 - 1, Version: "v1 <&>\u2028\xff", Capabilities: []string{"output_credit", "é\x00"},
			Token: "0123abcd"},
		Result{Status: StatusSuccess, ExitCode: ptr[int32](-1)},
	}
	for _, v := range values {
		frame, err := Marshal(TypeOutputChunk, v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := reflectJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := frame[HeaderSize:]; !bytes.Equal(got, want) {
			t.Errorf("Marshal(%T) payload\n got %s\nwant %s", v, got, want)
		}
		if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-HeaderSize {
			t.Errorf("Marshal(%T) length prefix %d, payload is %d bytes", v, n, len(frame)-HeaderSize)
		}
	}
}

// serde's Vec and HashMap refuse null, so nil slices and maps go out as []
// and {}.
func TestNilCollectionsEncodeEmpty(t *testing.T) {
	for _, v := range []any{Job{JobID: "j"}, &Job{JobID: "j"}, Handshake{Lane: "net"}, &Handshake{Lane: "net"}} {
		frame, err := Marshal(TypeJob, v)
		if err != nil {
			t.Fatal(err)
		}
		viaJSON, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{frame[HeaderSize:], viaJSON} {
			if bytes.Contains(b, []byte("null")) {
				t.Errorf("%T encodes to %s, which contains null", v, b)
			}
		}
	}
	frame, _ := Marshal(TypeJob, Job{})
	for _, want := range []string{`"argv":[]`, `"env":{}`, `"file_paths":[]`} {
		if !bytes.Contains(frame, []byte(want)) {
			t.Errorf("Job{} encodes to %s, missing %s", frame[HeaderSize:], want)
		}
	}
	frame, _ = Marshal(TypeHandshake, Handshake{})
	if !bytes.Contains(frame, []byte(`"capabilities":[]`)) {
		t.Errorf("Handshake{} encodes to %s, want capabilities []", frame[HeaderSize:])
	}
}

func TestMarshalError(t *testing.T) {
	_, err := Marshal(TypeJob, make(chan int))
	if err == nil || !strings.Contains(err.Error(), "encoding Job payload") {
		t.Fatalf("err = %v, want an encoding Job payload error", err)
	}
	var w bytes.Buffer
	if err := WriteFrame(&w, TypeJob, make(chan int)); err == nil || w.Len() != 0 {
		t.Fatalf("WriteFrame of an unencodable value: err %v, wrote %d bytes", err, w.Len())
	}
}

type countingWriter struct {
	writes int
	buf    bytes.Buffer
	err    error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.err != nil {
		return 0, w.err
	}
	return w.buf.Write(p)
}

func TestWriteFrameSingleWrite(t *testing.T) {
	w := &countingWriter{}
	if err := WriteFrame(w, TypeOutputChunk, OutputChunk{JobID: "j", Chunk: make(Bytes, 100000), Stream: Stdout}); err != nil {
		t.Fatal(err)
	}
	if w.writes != 1 {
		t.Fatalf("WriteFrame made %d Write calls, want 1", w.writes)
	}
	errBroken := errors.New("broken pipe")
	w = &countingWriter{err: errBroken}
	err := WriteFrame(w, TypeCancel, Cancel{JobID: "j"})
	if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "writing Cancel frame") {
		t.Fatalf("err = %v, want the writer's error wrapped with the frame type", err)
	}
}

func hdr(n uint32, t MsgType) []byte {
	return append(binary.BigEndian.AppendUint32(nil, n), byte(t))
}

func TestFrameReaderEnds(t *testing.T) {
	cancel, err := Marshal(TypeCancel, Cancel{JobID: "j"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		stream     []byte
		frames     int   // frames read successfully before the error
		wantErr    error // matched with errors.Is
		wantBareEO bool  // the error is io.EOF itself, not wrapped
	}{
		{"Empty", nil, 0, io.EOF, true},
		{"CleanAfterOne", cancel, 1, io.EOF, true},
		{"CleanAfterTwo", append(append([]byte{}, cancel...), cancel...), 2, io.EOF, true},
		{"CutHeader1", cancel[:1], 0, io.ErrUnexpectedEOF, false},
		{"CutHeader4", cancel[:4], 0, io.ErrUnexpectedEOF, false},
		{"CutAfterHeader", cancel[:HeaderSize], 0, io.ErrUnexpectedEOF, false},
		{"CutPayload", cancel[:len(cancel)-1], 0, io.ErrUnexpectedEOF, false},
		{"CutSecondHeader", append(append([]byte{}, cancel...), cancel[:3]...), 1, io.ErrUnexpectedEOF, false},
		{"CutSecondPayload", append(append([]byte{}, cancel...), cancel[:7]...), 1, io.ErrUnexpectedEOF, false},
	}
	for _, tc := range tests {
		for _, mode := range []string{"whole", "onebyte"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				var r io.Reader = bytes.NewReader(tc.stream)
				if mode == "onebyte" {
					r = iotest.OneByteReader(r)
				}
				fr := NewFrameReader(r, 0)
				for i := 0; i < tc.frames; i++ {
					f, err := fr.Next()
					if err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
					if f.Type != TypeCancel || string(f.Payload) != `{"job_id":"j"}` {
						t.Fatalf("frame %d = %v %q", i, f.Type, f.Payload)
					}
				}
				_, err := fr.Next()
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if tc.wantBareEO != (err == io.EOF) {
					t.Fatalf("err == io.EOF is %v, want %v (err %v)", err == io.EOF, tc.wantBareEO, err)
				}
			})
		}
	}
}

func TestFrameReaderTooLarge(t *testing.T) {
	tests := []struct {
		name   string
		max    uint32
		length uint32
	}{
		{"OneOver", 1024, 1025},
		{"Hostile", 1024, 0xFFFFFFFF},
		{"DefaultMax", 0, DefaultMaxFrame + 1},
		{"HostileDefaultMax", 0, 0xFFFFFFFF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The stream really holds 2000 payload bytes after the header;
			// none of them may be consumed.
			stream := append(hdr(tc.length, TypeOutputChunk), bytes.Repeat([]byte{'x'}, 2000)...)
			rd := bytes.NewReader(stream)
			fr := NewFrameReader(rd, tc.max)
			_, err := fr.Next()
			var tooLarge *FrameTooLargeError
			if !errors.As(err, &tooLarge) {
				t.Fatalf("err = %v, want *FrameTooLargeError", err)
			}
			if !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("errors.Is(%v, ErrFrameTooLarge) = false", err)
			}
			wantMax := tc.max
			if wantMax == 0 {
				wantMax = DefaultMaxFrame
			}
			if tooLarge.Len != tc.length || tooLarge.Max != wantMax || tooLarge.Type != TypeOutputChunk {
				t.Fatalf("error fields = %+v, want Len %d Max %d Type OutputChunk", tooLarge, tc.length, wantMax)
			}
			if !strings.Contains(err.Error(), "OutputChunk") {
				t.Errorf("error %q does not name the frame type", err)
			}
			if rd.Len() != 2000 {
				t.Fatalf("reader consumed %d payload bytes, want 0", 2000-rd.Len())
			}
			if cap(fr.buf) != 0 {
				t.Fatalf("reader allocated a %d-byte buffer for a refused frame", cap(fr.buf))
			}
		})
	}
}

func TestFrameReaderExactlyMax(t *testing.T) {
	for _, max := range []uint32{1, 1000, frameReadChunk, frameReadChunk + 1, 3*frameReadChunk + 17} {
		payload := bytes.Repeat([]byte{'a'}, int(max))
		stream := AppendFrame(nil, TypeOutputChunk, payload)
		stream = AppendFrame(stream, TypeHeartbeat, nil)
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(stream)
			if oneByte {
				r = iotest.HalfReader(r)
			}
			fr := NewFrameReader(r, max)
			f, err := fr.Next()
			if err != nil {
				t.Fatalf("max %d: %v", max, err)
			}
			if f.Type != TypeOutputChunk || !bytes.Equal(f.Payload, payload) {
				t.Fatalf("max %d: got %v with %d bytes", max, f.Type, len(f.Payload))
			}
			if cap(fr.buf) > int(max) {
				t.Fatalf("max %d: buffer grew to %d", max, cap(fr.buf))
			}
			f, err = fr.Next()
			if err != nil || f.Type != TypeHeartbeat || len(f.Payload) != 0 {
				t.Fatalf("max %d: empty frame = %v %q, %v", max, f.Type, f.Payload, err)
			}
			if _, err := fr.Next(); err != io.EOF {
				t.Fatalf("max %d: err = %v, want io.EOF", max, err)
			}
		}
	}
}

// A length prefix that promises much more than the peer sends costs a
// bounded allocation, not the announced size.
func TestFrameReaderLyingPrefix(t *testing.T) {
	stream := append(hdr(DefaultMaxFrame, TypeOutputChunk), bytes.Repeat([]byte{'x'}, 100)...)
	fr := NewFrameReader(bytes.NewReader(stream), 0)
	_, err := fr.Next()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(fr.buf) > frameReadChunk {
		t.Fatalf("a 16 MiB prefix with 100 bytes behind it allocated %d bytes", cap(fr.buf))
	}
	// With 200 KiB behind it the buffer tracks what arrived.
	sent := 200 << 10
	stream = append(hdr(DefaultMaxFrame, TypeOutputChunk), bytes.Repeat([]byte{'x'}, sent)...)
	fr = NewFrameReader(bytes.NewReader(stream), 0)
	if _, err := fr.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(fr.buf) > 2*sent {
		t.Fatalf("%d bytes received, %d allocated", sent, cap(fr.buf))
	}
}

func TestFrameReaderUnknownType(t *testing.T) {
	stream := AppendFrame(nil, MsgType(0x99), []byte(`{"future":true}`))
	fr := NewFrameReader(bytes.NewReader(stream), 0)
	f, err := fr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != 0x99 || f.Type.Known() || f.Type.String() != "0x99" || string(f.Payload) != `{"future":true}` {
		t.Fatalf("got %v (known %v) %q", f.Type, f.Type.Known(), f.Payload)
	}
}

type errAfterReader struct {
	data []byte
	err  error
}

func (r *errAfterReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestFrameReaderReadError(t *testing.T) {
	errReset := errors.New("connection reset")
	frame, _ := Marshal(TypeCancel, Cancel{JobID: "j"})
	for _, cut := range []int{0, 2, HeaderSize, len(frame) - 1} {
		fr := NewFrameReader(&errAfterReader{data: frame[:cut], err: errReset}, 0)
		if _, err := fr.Next(); !errors.Is(err, errReset) {
			t.Fatalf("cut at %d: err = %v, want %v", cut, err, errReset)
		}
	}
}

func TestFrameReaderReusesAndReleasesBuffer(t *testing.T) {
	small, _ := Marshal(TypeCancel, Cancel{JobID: "j"})
	rd := bytes.NewReader(small)
	fr := NewFrameReader(rd, 0)
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(small)
		if _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("reading a frame into a warm reader allocates %v times", allocs)
	}

	big := AppendFrame(nil, TypeOutputChunk, make([]byte, 2<<20))
	fr = NewFrameReader(bytes.NewReader(append(append([]byte{}, big...), small...)), 0)
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	if cap(fr.buf) < 2<<20 {
		t.Fatalf("buffer %d after a 2 MiB frame", cap(fr.buf))
	}
	f, err := fr.Next()
	if err != nil || string(f.Payload) != `{"job_id":"j"}` {
		t.Fatalf("small frame after a large one: %q, %v", f.Payload, err)
	}
	if cap(fr.buf) > frameKeepCap {
		t.Fatalf("reader still holds a %d-byte buffer after a small frame", cap(fr.buf))
	}
}

func TestMsgTypeNames(t *testing.T) {
	want := map[MsgType]string{
		0x01: "Handshake", 0x02: "HandshakeAck", 0x10: "Job", 0x11: "JobAck", 0x12: "Result",
		0x20: "Cancel", 0x21: "CancelAck", 0x30: "OutputChunk", 0x40: "Heartbeat",
		0x41: "HeartbeatAck", 0xF0: "Shutdown", 0xE0: "OutputAck", 0xE1: "StdinChunk", 0xE2: "StdinAck",
		0xE3: "OutputRaw", 0xE4: "JobStarted",
	}
	for i := range 256 {
		mt := MsgType(i)
		name, known := want[mt]
		if mt.Known() != known {
			t.Errorf("%#x.Known() = %v, want %v", i, mt.Known(), known)
		}
		if !known {
			name = strings.ToUpper(strings.TrimPrefix(strings.ToLower(mt.String()), "0x"))
			if mt.String() != "0x"+name || len(name) != 2 {
				t.Errorf("%#x.String() = %q, want 0xNN", i, mt.String())
			}
			continue
		}
		if mt.String() != name {
			t.Errorf("%#x.String() = %q, want %q", i, mt.String(), name)
		}
	}
}

// FrameReader.Alloc gives the buffer a payload is read into: the payload
// lies in it (the caller's); nil from it, the reader's own buffer as before.
func TestFrameReaderAlloc(t *testing.T) {
	var in []byte
	for _, p := range []string{"first", "second", "third"} {
		in = AppendFrame(in, TypeOutputRaw, []byte(p))
	}
	mine := make([]byte, 0, 64)
	fr := NewFrameReader(bytes.NewReader(in), 0)
	calls := 0
	fr.Alloc = func(t MsgType, n int) []byte {
		calls++
		if t != TypeOutputRaw || calls == 2 {
			return nil
		}
		return mine
	}
	for i, want := range []string{"first", "second", "third"} {
		f, err := fr.Next()
		if err != nil || string(f.Payload) != want {
			t.Fatalf("frame %d: %q %v", i, f.Payload, err)
		}
		if inMine := &f.Payload[0] == &mine[:1][0]; inMine != (i != 1) {
			t.Fatalf("frame %d read into the given buffer: %v", i, inMine)
		}
	}
}
