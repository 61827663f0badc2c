package lanes

import (
	"context"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// job.stream and job.stdin: a job's output to one control connection,
// every byte at the connection's pace, and its stdin from it.

// StreamEvent is the kind of the lines job.stream pushes (not an event
// of the log: they go to the one connection).
const StreamEvent = "job.stream"

// streamInFlight is how many pushed lines a job.stream may have queued for
// its connection and not yet written.
const streamInFlight = 2

type (
	streamParams struct {
		ID    string       `json:"id"`
		JobID string       `json:"job_id"`
		Job   *api.JobSpec `json:"submit,omitempty"` // submit this job and stream it from its first byte
		// Follow (default true): stream until the job ends; false: only
		// what its record keeps now.
		Follow *bool `json:"follow,omitempty"`
		// Stdin: this call streams the job's stdin (job.stdin); the
		// stdin ends when the call's client goes away. With submit, the
		// job is submitted with stdin_stream.
		Stdin bool `json:"stdin,omitempty"`
		// Observe: the reader never holds the job back; when it falls
		// behind it skips ahead and is told of the gap (reason
		// "behind"). Not with submit or stdin.
		Observe bool `json:"observe,omitempty"`
		// Binary: a piece of output comes as a line with data_len, then
		// that many bytes as they are (no JSON string, no base64), where
		// the connection can (the control socket).
		Binary bool `json:"binary,omitempty"`
	}
	streamResult struct {
		Job    api.JobRecord `json:"job"`
		Bytes  int64         `json:"bytes"`
		Missed int64         `json:"missed"`
	}
	stdinParams struct {
		ID      string  `json:"id"`
		JobID   string  `json:"job_id"`
		Data    *string `json:"data,omitempty"`
		DataB64 []byte  `json:"data_b64,omitempty"`
		EOF     bool    `json:"eof,omitempty"`
	}
)

// streamMethod is job.stream: it pushes the job's output to the call's
// connection as job.stream lines, one offset after the other (a gap says
// what the client will not get), and answers with the job's terminal record
// and what it delivered once the job has ended and every byte is written.
func (m *Manager) streamMethod(call api.Call) {
	sc, ok := call.(api.StreamCall)
	if !ok {
		call.Fail(api.Errorf(api.CodeInvalidRequest, "job.stream needs a connection that streams (the control socket)"))
		return
	}
	var p streamParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.JobID != "" {
		if p.ID != "" && p.ID != p.JobID {
			call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for job.stream: id %q and job_id %q differ; give one", p.ID, p.JobID))
			return
		}
		p.ID = p.JobID
	}
	if (p.ID == "") == (p.Job == nil) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for job.stream: give the job's id, or a job to submit"))
		return
	}
	if p.Observe && (p.Job != nil || p.Stdin) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for job.stream: observe is for a job's output only (not with submit or stdin)"))
		return
	}
	if p.Job != nil {
		if p.Follow != nil && !*p.Follow {
			call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for job.stream: a job submitted here is followed"))
			return
		}
		spec := *p.Job
		spec.StdinStream = spec.StdinStream || p.Stdin
		// The reader is named for the door the call came through: control
		// (the socket), http (the HTTP API's /execute), ui.
		m.SubmitReading(spec, api.OriginOf(call).By, func(id string, rd *OutputReader, err error) {
			if err != nil {
				call.Fail(err)
				return
			}
			// The first line says which job: the client can cancel it and
			// send its stdin.
			sc.Push(StreamEvent, appendStreamHead(nil, id), func(bool) {})
			m.pump(sc, rd, spec.StdinStream, p.Binary)
		})
		return
	}
	var rd *OutputReader
	var err error
	if p.Observe {
		rd, err = m.ObserveOutput(p.ID, "observer")
	} else {
		rd, err = m.ReadOutput(p.ID, "control", p.Follow == nil || *p.Follow)
	}
	if err != nil {
		call.Fail(err)
		return
	}
	m.pump(sc, rd, p.Stdin, p.Binary)
}

// pump writes rd's pieces to the call's connection, at most streamInFlight
// lines it has not taken yet, and answers at the end. The client going
// away detaches the reader at once (and ends the job's stdin if the call
// streams it).
func (m *Manager) pump(sc api.StreamCall, rd *OutputReader, stdinOwner, binary bool) {
	raw, _ := sc.(api.RawPusher)
	if !binary {
		raw = nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	sc.OnClose(cancel)
	id := rd.JobID()
	go func() {
		defer cancel()
		// streamInFlight buffers, each a line's until the client took it
		// (a Push keeps its data no longer): the lines of a job's output
		// reuse them rather than allocating one each.
		bufs := make(chan []byte, streamInFlight)
		for range streamInFlight {
			bufs <- nil
		}
		err := rd.ReadToEnd(ctx, func(p OutputPiece) error {
			var buf []byte
			select {
			case buf = <-bufs:
			case <-ctx.Done():
				return ctx.Err()
			}
			taken := func(line []byte) func(bool) {
				return func(ok bool) {
					if !ok {
						cancel()
					}
					bufs <- line[:0]
				}
			}
			if raw != nil && p.Gap == 0 && len(p.Data) > 0 {
				// The bytes go as they lie in the stream's chunk, held
				// until the socket took them; else (joined in the
				// reader's buffer, which the next piece reuses) copied
				// after the line, into its buffer.
				line := wire.AppendStreamPieceRaw(buf[:0], &wire.StreamPiece{JobID: id, Offset: p.Offset, Stream: p.Stream, Data: p.Data})
				if release := rd.Hold(); release != nil {
					back := taken(line)
					raw.PushRaw(StreamEvent, line, p.Data, func(ok bool) {
						release()
						back(ok)
					})
					return nil
				}
				whole := append(line, p.Data...)
				raw.PushRaw(StreamEvent, whole[:len(line)], whole[len(line):], taken(whole))
				return nil
			}
			line := appendStreamPiece(buf[:0], id, p)
			sc.Push(StreamEvent, line, taken(line))
			return nil
		})
		if err != nil {
			rd.Close("detached")
			if stdinOwner {
				m.StdinGone(id)
			}
			return
		}
		rd.Close("ended")
		delivered, missed := rd.Counts()
		sc.Respond(streamResult{Job: rd.Record(), Bytes: delivered, Missed: missed})
	}()
}

// appendStreamHead is the first line of a job.stream that submitted its
// job: its id, nothing read yet.
func appendStreamHead(dst []byte, id string) []byte {
	return wire.AppendStreamPiece(dst, &wire.StreamPiece{JobID: id})
}

// appendStreamPiece is a job.stream line's data (wire.StreamPiece).
func appendStreamPiece(dst []byte, id string, p OutputPiece) []byte {
	return wire.AppendStreamPiece(dst, &wire.StreamPiece{JobID: id, Offset: p.Offset, Stream: p.Stream, Data: p.Data,
		Gap: p.Gap, Reason: p.GapReason})
}

// stdinMethod is job.stdin: the next piece of a job's streamed stdin
// (data or data_b64) and/or its end (eof), answered {} once it is on its
// way to the job. One call at a time per job.
func (m *Manager) stdinMethod(call api.Call) {
	var p stdinParams
	if err := decodeID(call, &p.ID, &p.JobID, &p); err != nil {
		call.Fail(err)
		return
	}
	if p.Data != nil && p.DataB64 != nil {
		call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for job.stdin: give data or data_b64, not both"))
		return
	}
	data := p.DataB64
	if p.Data != nil {
		data = []byte(*p.Data)
	}
	m.Stdin(p.ID, data, p.EOF, func(err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(struct{}{})
	})
}
