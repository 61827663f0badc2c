package api

// Call is one request for a method, as a front-end (the control socket,
// later others) hands it to the handler registered for the method. The
// handler answers it exactly once, with Respond or Fail, either before it
// returns or later from any goroutine (job.wait answers when its job ends);
// answers after the first are ignored. Handlers run on the front-end's
// connection and must not block: work that takes time answers later.
type Call interface {
	// Method is the method called.
	Method() string
	// Decode decodes the call's params into v, refusing unknown fields;
	// absent params leave v as it is. The error is an *Error with
	// CodeInvalidParams naming the method and the problem.
	Decode(v any) error
	// Respond answers with result, encoded as JSON.
	Respond(result any)
	// Fail answers with err: an *Error as it is, any other error as
	// CodeInternal.
	Fail(err error)
	// OnClose registers f to run if the call's client goes away (its
	// connection closes, the daemon stops) while the call is unanswered:
	// work pending for it is cancelled there. f runs at most once, on the
	// goroutine closing the connection, and must not block; it does not
	// run once the call is answered. Registered after the client is gone,
	// f runs at once.
	OnClose(f func())
}

// StreamCall is a Call whose front-end can also send its client lines
// ahead of the answer, at the client's pace: the control socket's calls are
// (job.stream). A line is never dropped; the method sends the next once
// the client's connection has taken the last, so a client that does not
// read holds the method back, not the daemon's memory.
type StreamCall interface {
	Call
	// Push queues one event line for the call's client: event, with data
	// (a JSON object) as its data. taken runs once the client's socket
	// has taken the line (true), or the connection is gone without it
	// (false); it must not block. Pushed after the answer, a line is
	// dropped (taken(false)).
	Push(event string, data []byte, taken func(ok bool))
}

// Handler serves one method.
type Handler func(Call)

// Mux is where a domain registers its methods: each front-end that serves
// them is one. Registering a method twice is a programming error (a
// panic), and so is registering once the front-end serves.
type Mux interface {
	Handle(method string, h Handler)
}

// NoParams decodes the params of a method that takes none: any field is
// refused.
type NoParams struct{}
