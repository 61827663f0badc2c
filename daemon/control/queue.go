package control

import "github.com/orchestrd/orchestrd/platform/sockserve"

// The outbound queue is the unix-socket server's (platform/sockserve).
type (
	OutQueue     = sockserve.OutQueue
	QueueConn    = sockserve.QueueConn
	QueueOptions = sockserve.QueueOptions
	Writer       = sockserve.Writer
)
