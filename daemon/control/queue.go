package control

import "github.com/orchestrd/orchestrd/supervisor/sockserve"

// The outbound queue is the unix-socket server's (supervisor/sockserve).
type (
	OutQueue     = sockserve.OutQueue
	QueueConn    = sockserve.QueueConn
	QueueOptions = sockserve.QueueOptions
	Writer       = sockserve.Writer
)
