// Package wire holds the byte-level protocols orchestrd speaks and nothing
// else: no sockets, no goroutines, no actors.
//
//   - runner.go, frame.go: the Loopr daemon<->runner protocol. A frame is a
//     4-byte big-endian payload length (the type byte is not counted), one
//     type byte, then a JSON payload with snake_case fields.
//   - control.go: the Loopr TUI<->daemon NDJSON framing used on the control
//     socket: {id, method, params} -> {id, result} | {id, error}, and pushed
//     {event, data} lines.
//
// Every decoder here has a fuzz target with seeds in testdata/.
package wire
