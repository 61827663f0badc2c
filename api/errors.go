package api

import (
	"fmt"

	"github.com/orchestrd/orchestrd/wire"
)

// Error codes of a failed call. Domains fail calls with them and every
// front-end maps them onto its protocol (the control socket sends them as
// they are). The values are the control protocol's, defined once in wire:
// JSON-RPC's reserved codes and the Loopr spec's table, plus orchestrd's
// own 1004 and 1005.
const (
	CodeParseError     = wire.CodeParseError     // -32700: the request is not JSON
	CodeInvalidRequest = wire.CodeInvalidRequest // -32600: JSON, but not a request
	CodeMethodNotFound = wire.CodeMethodNotFound // -32601
	CodeInvalidParams  = wire.CodeInvalidParams  // -32602
	CodeInternal       = wire.CodeInternal       // -32603
	CodeNotFound       = wire.CodeNotFound       // 1001: any unknown id (a job, a lane)
	CodeInvalidState   = wire.CodeInvalidState   // 1002: wrong state for the action
	CodeUnauthorized   = wire.CodeUnauthorized   // 1003: the peer is refused
	CodeQueueFull      = wire.CodeQueueFull      // 1004: the lane's queue is full
	CodeShuttingDown   = wire.CodeShuttingDown   // 1005: the daemon is stopping
	// 1006: the state store could not record it (a full disk, a failing
	// file): a job.submit refused so is not accepted.
	CodeStoreUnavailable = wire.CodeStoreUnavailable
)

// Error is why a call failed: a code (above), a message for people, and
// optional data for programs (any value that encodes as JSON).
type Error struct {
	Code    int
	Message string
	Data    any
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
