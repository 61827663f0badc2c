package chat

import (
	"encoding/json"

	"github.com/orchestrd/orchestrd/api"
)

// The chat reaches the executors domain and the event bus through these
// small interfaces; daemon.Run implements them (daemon/chatports.go) over
// executors.Manager and the bus, and the tests with doubles. A domain never
// imports another.

// Tasks runs the chat's agent tasks on an executor pool.
type Tasks interface {
	// Execute queues a task as task.execute does; reply runs once, on any
	// goroutine, with its id and session or the error (an *api.Error)
	// that refused it, and must not block.
	Execute(spec api.TaskSpec, reply func(taskID, sessionID string, err error))
	// Stop stops a queued or running task as task.stop does; reply runs
	// once, on any goroutine (nil: it is being stopped).
	Stop(taskID string, reply func(err error))
	// Ready reports whether pool has an executor up (idle or busy).
	Ready(pool string) bool
}

// TaskEvent is one event of an executor task: a message of its agent
// (Finished false) or its end.
type TaskEvent struct {
	TaskID    string
	Sequence  int64
	EventType string          // a message's: content_block_delta, text, assistant, tool_use...
	EventData json.RawMessage // a message's, as its executor sent it
	Finished  bool            // the task ended: State and Error say how
	State     api.TaskState
	Error     *api.TaskError
}

// TaskEvents hands the chat the executors' task events (task.message once
// committed, task.finished), a task's in order, its messages before its
// end. f runs on the emitter's goroutine and must not block; stop ends the
// delivery.
type TaskEvents interface {
	Follow(f func(TaskEvent)) (stop func())
}
