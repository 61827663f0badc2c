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

// RawPusher is a StreamCall that can also send bytes as they are: Push's
// line, then raw (its data announced them with data_len). The control
// socket's calls are; job.stream called with binary uses it. raw is not
// copied: it must stay as it is until taken runs.
type RawPusher interface {
	PushRaw(event string, data, raw []byte, taken func(ok bool))
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
	// dropped (taken(false)). data is the caller's again once taken
	// runs: Push keeps it no longer (job.stream reuses it).
	Push(event string, data []byte, taken func(ok bool))
}

// Origin is the door a call came through and who stood at it, as its
// front-end knows them (never as its client says): what a resolution
// records (Resolution's By, BySession, ByPid).
type Origin struct {
	By      string `json:"by"`                // ByControl (a control-socket client), ByUI (the dashboard)
	Session string `json:"session,omitempty"` // ByUI: the dashboard session's short id (never its cookie)
	Pid     int32  `json:"pid,omitempty"`     // ByControl: the peer's pid (0: in a pid namespace the daemon cannot see)
	// Admit is the front-end's check of who stands behind a call of a
	// method only a person may call (PersonMux): run before the method,
	// its error refuses the call. The control socket checks its peer
	// itself; a front-end calling in-process (control.Server.Invoke) must
	// set it to call such a method at all.
	Admit func() error `json:"-"`
}

// OriginCall is a Call whose front-end says where it came from.
type OriginCall interface {
	Call
	Origin() Origin
}

// OriginOf is call's origin; a call whose front-end does not say is a
// control client's with no pid known.
func OriginOf(call Call) Origin {
	if oc, ok := call.(OriginCall); ok {
		return oc.Origin()
	}
	return Origin{By: ByControl}
}

// Handler serves one method.
type Handler func(Call)

// Mux is where a domain registers its methods: each front-end that serves
// them is one. Registering a method twice is a programming error (a
// panic), and so is registering once the front-end serves.
type Mux interface {
	Handle(method string, h Handler)
}

// PersonMux is a Mux that also serves methods only a person may call: one
// that answers a question put to a person (resolves an approval, passes
// a plan gate). Its front-ends refuse such a method to every process the
// daemon started (proc.StartedRefusal), through whatever door it comes,
// with conn.refused.
type PersonMux interface {
	Mux
	HandlePerson(method string, h Handler)
}

// HandlePerson registers h on mux as a method only a person may call. A
// mux that cannot refuse the daemon's own processes must not serve it: it
// panics.
func HandlePerson(mux Mux, method string, h Handler) {
	pm, ok := mux.(PersonMux)
	if !ok {
		panic("api: " + method + " is a method only a person may call, and this Mux cannot tell a person's call")
	}
	pm.HandlePerson(method, h)
}

// DecodeID decodes call's params into v, whose id is at id, for a method
// that acts on one thing by its id: params that do not decode, or that
// name no id ("<method>: id is missing"), fail call and DecodeID says
// false.
func DecodeID(call Call, v any, id *string) bool {
	if err := call.Decode(v); err != nil {
		call.Fail(err)
		return false
	}
	if *id == "" {
		call.Fail(Errorf(CodeInvalidParams, "%s: id is missing", call.Method()))
		return false
	}
	return true
}

// NoParams decodes the params of a method that takes none: any field is
// refused.
type NoParams struct{}
