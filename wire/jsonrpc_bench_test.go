package wire

import (
	"encoding/json"
	"testing"
)

// reportMessage is report_message's params as an executor sends them and
// the daemon reads them (event_data stays raw: it is stored as it came).
type reportMessage struct {
	SessionToken string          `json:"session_token"`
	TaskID       string          `json:"task_id"`
	Sequence     int64           `json:"sequence"`
	Timestamp    int64           `json:"timestamp"`
	EventType    string          `json:"event_type"`
	EventData    json.RawMessage `json:"event_data"`
}

// BenchmarkRPCReportMessage encodes one report_message notification and
// decodes it again, params included: the executor -> daemon hot path.
func BenchmarkRPCReportMessage(b *testing.B) {
	params := &reportMessage{
		SessionToken: "tok-3f9a8c1e5b7d4a2f",
		TaskID:       "t-000042",
		Sequence:     1,
		Timestamp:    1737331200123,
		EventType:    "content_block_delta",
		EventData:    json.RawMessage(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello, world! Let me read the file first."}}`),
	}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = AppendRPCNotification(buf[:0], "report_message", params)
		if err != nil {
			b.Fatal(err)
		}
		m, derr := ParseRPC(buf[:len(buf)-1])
		if derr != nil {
			b.Fatal(derr)
		}
		var got reportMessage
		if perr := DecodeRPCParams(m, &got); perr != nil || got.Sequence != params.Sequence {
			b.Fatal(perr)
		}
		params.Sequence++
	}
	b.SetBytes(int64(len(buf)))
}

// The one-pass decoder against the long way, on the line executors flood.
func BenchmarkDecodeReportLine(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","method":"report_message","params":{"session_token":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","task_id":"t-bench","sequence":12345,"timestamp":1764000000000,"event_type":"content_block_delta","event_data":{"delta":{"text":"chunk 12345 of the agent's streamed answer"}}}}`)
	var in Interner
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			if _, ok := in.DecodeReportLine(line); !ok {
				b.Fatal("left to the long way")
			}
		}
	})
	b.Run("long-way", func(b *testing.B) {
		for b.Loop() {
			m, _ := ParseRPCInPlace(line)
			if _, ok := in.DecodeReportMessage(m.Params); !ok {
				b.Fatal("refused")
			}
		}
	})
}
