package wire

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"io"
	"strings"
	"testing"
)

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func benchJob() Job {
	return Job{
		JobID:          "job-000042",
		AgentID:        "agent-7",
		ToolName:       "bash",
		Command:        "go test ./...",
		Argv:           []string{"go", "test", "./..."},
		Cwd:            "/home/user/project",
		WorktreeDir:    "/home/user/.loopr/worktrees/loop-1",
		Env:            map[string]string{"GOFLAGS": "-mod=mod", "HOME": "/home/user"},
		TimeoutMs:      120000,
		MaxOutputBytes: 1 << 20,
		FilePaths:      []string{"/home/user/project/main.go"},
	}
}

func benchChunk(n int) OutputChunk {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return OutputChunk{JobID: "job-000042", Chunk: b, Stream: Stdout}
}

func BenchmarkFrameEncode(b *testing.B) {
	cases := []struct {
		name string
		t    MsgType
		v    any
	}{
		{"Job", TypeJob, benchJob()},
		{"OutputChunk64K", TypeOutputChunk, benchChunk(64 << 10)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				out, err := Marshal(c.t, c.v)
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			b.SetBytes(int64(n))
		})
	}
}

func BenchmarkFrameDecode(b *testing.B) {
	job, err := Marshal(TypeJob, benchJob())
	if err != nil {
		b.Fatal(err)
	}
	chunk, err := Marshal(TypeOutputChunk, benchChunk(64<<10))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name  string
		frame []byte
		newV  func() any
	}{
		{"Job", job, func() any { return new(Job) }},
		{"OutputChunk64K", chunk, func() any { return new(OutputChunk) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.frame)))
			rd := bytes.NewReader(c.frame)
			fr := NewFrameReader(rd, 0)
			for b.Loop() {
				rd.Reset(c.frame)
				f, err := fr.Next()
				if err != nil {
					b.Fatal(err)
				}
				if err := Unmarshal(f, c.newV()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBytesMarshal(b *testing.B) {
	src := benchChunk(4 << 10).Chunk
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := src.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBytesUnmarshal(b *testing.B) {
	src := benchChunk(4 << 10).Chunk
	arr, err := src.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	b64 := []byte(`"` + base64Std(src) + `"`)
	for _, c := range []struct {
		name string
		data []byte
	}{{"Array", arr}, {"Base64", b64}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				var out Bytes
				if err := out.UnmarshalJSON(c.data); err != nil {
					b.Fatal(err)
				}
				if len(out) != len(src) {
					b.Fatalf("decoded %d bytes, want %d", len(out), len(src))
				}
			}
		})
	}
}

func BenchmarkParseRequest(b *testing.B) {
	line := []byte(`{"id":12345,"method":"plan.iterate","params":{"id":"loop-42","feedback":"split the spec into two"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		req, rerr := ParseRequest(line)
		if rerr != nil || req.ID != 12345 {
			b.Fatal(rerr)
		}
	}
}

func BenchmarkLineReader(b *testing.B) {
	var sb strings.Builder
	const lines = 1000
	for range lines {
		sb.WriteString(`{"id":1,"method":"chat.send","params":{"message":"Build a REST API"}}` + "\n")
	}
	data := []byte(sb.String())
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	rd := bytes.NewReader(data)
	for b.Loop() {
		rd.Reset(data)
		lr := NewLineReader(rd, 0)
		n := 0
		for {
			_, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != lines {
			b.Fatalf("read %d lines, want %d", n, lines)
		}
	}
}

func BenchmarkAppendResponse(b *testing.B) {
	type result struct {
		MessageID string `json:"message_id"`
	}
	res := result{MessageID: "msg-001"}
	rerr := Errorf(CodeNotFound, "loop %q not found", "loop-42")
	w := bufio.NewWriter(io.Discard)
	b.Run("Result", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			var err error
			buf, err = AppendResponse(buf[:0], 1, res, nil)
			if err != nil {
				b.Fatal(err)
			}
			w.Write(buf)
		}
	})
	b.Run("Error", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			var err error
			buf, err = AppendResponse(buf[:0], 1, nil, rerr)
			if err != nil {
				b.Fatal(err)
			}
			w.Write(buf)
		}
	})
}
