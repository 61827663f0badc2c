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
//   - jsonrpc.go: JSON-RPC 2.0 over newline-delimited JSON, Agor's
//     daemon<->executor protocol. ParseRPC decodes a line, in either
//     direction, into exactly one RPCMessage: a request, a notification, a
//     result or an error response; AppendRPCRequest, AppendRPCNotification,
//     AppendRPCResult, AppendRPCError (and AppendRPCMessage) write them;
//     DecodeRPCParams decodes params into a struct; NewRPCLineReader bounds
//     a line (DefaultMaxRPCLine, 8 MiB).
//   - reachout.go: vibe-reachout's hook socket (spec 002): one IpcRequest
//     line in (DecodeReachoutRequest, bounded by MaxReachoutLine), one
//     IpcResponse line out (AppendReachoutResponse); ParseUUID reads a
//     request_id as Rust's uuid crate does.
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
// JSON-RPC choices, where the JSON-RPC 2.0 spec leaves room or Agor's
// catalog is silent:
//
//   - Batches (a JSON array) are refused with -32600 and a message saying
//     so: Agor sends none. The answer, as for any line whose id cannot be
//     read, carries a null id.
//   - Ids are strings or numbers. A number keeps its exact text (integers of
//     any size survive, and are echoed as sent); a string is kept decoded.
//     A null id is accepted only in an error response; a request with one is
//     refused (leave id out for a notification).
//   - A refused line that had one valid id is answered with that id, so the
//     peer can fail its pending call; a refused line that was meant as a
//     response (no method, a result or an error) is not answered.
//   - Params must be an object or an array (-32600 otherwise, since the
//     request object itself is malformed); params null counts as absent.
//     A result may be any value, null included.
//   - jsonrpc, id, method, params, result and error given twice (and code,
//     message, data in an error) are an invalid request, as on the control
//     socket; other members are ignored. An error code must be a plain
//     integer.
//   - DecodeRPCParams ignores unknown fields (the executor side grows); a
//     value of the wrong type is -32602 naming its field.
//
// Limits: a FrameReader refuses a length over its maximum before allocating
// and allocates at most about twice what has arrived for the frame being
// read; a LineReader refuses a line over its maximum without copying more
// than max+1 of its bytes, and after that refuses everything, so the tail of
// an oversized line is never read as a request.
//
// Every decoder here has a fuzz target (fuzz_test.go, jsonrpc_fuzz_test.go)
// with seeds in testdata/fuzz/.
package wire
