// Package wire holds the byte-level protocols orchestrd speaks and nothing
// else: no sockets, no goroutines, no actors.
//
//   - runner.go, frame.go: the Loopr daemon<->runner protocol. A frame is a
//     4-byte big-endian payload length (the type byte is not counted), one
//     type byte, then a JSON payload with snake_case fields.
//   - bytes.go: Bytes, the serde Vec<u8> form of OutputChunk.chunk.
//   - control.go: the Loopr TUI<->daemon NDJSON framing used on the control
//     socket: {id, method, params} -> {id, result} | {id, error}, and pushed
//     {event, data} lines.
//   - jsonutil.go: small JSON helpers shared by the fast paths.
//
// Choices where the Loopr spec is silent, made to match what a serde peer
// sends and accepts:
//
//   - Encoding never writes null where serde wants a collection: a nil
//     Job.Argv, Job.FilePaths, Handshake.Capabilities or OutputChunk.Chunk
//     goes out as [], a nil Job.Env as {}.
//   - Decoding is lenient about missing or unknown fields (serde ignores
//     unknown ones), except for the enums: a Result without a valid status
//     and an OutputChunk without a valid stream are refused, since those
//     types have no valid zero value. Variant names are case-sensitive and
//     null is refused, as serde does.
//   - A chunk decodes from an array of 0..255 or a standard base64 string;
//     null decodes as an empty chunk (serde would refuse it).
//   - A Shutdown payload is never inspected.
//   - Job.stdin_b64 is orchestrd's extension (the job's standard input,
//     base64); it is omitted when empty, so a Job without input is exactly
//     the spec's ToolJob.
//   - On the control socket, a duplicated id, method or params key is an
//     invalid request (serde refuses duplicate fields; encoding/json would
//     silently keep the last). A response's null result is sent as {}.
//
// Limits: a FrameReader refuses a length over its maximum before allocating
// and allocates at most about twice what has arrived for the frame being
// read; a LineReader refuses a line over its maximum without copying more
// than max+1 of its bytes, and after that refuses everything, so the tail of
// an oversized line is never read as a request.
//
// Every decoder here has a fuzz target (fuzz_test.go) with seeds in
// testdata/fuzz/.
package wire
