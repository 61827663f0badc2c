// Package control is the daemon's control socket, <home>/daemon.sock: the
// Loopr TUI<->daemon NDJSON protocol (package wire) over a unix stream
// socket, plus a small client (client.go) for the CLI, tests and benchmarks.
//
// The server knows no domain. It serves the protocol's own methods
// (connect, ping, disconnect, events.subscribe, events.unsubscribe, and
// Loopr's initialize and subscribe: loopr.go) and
// whatever is registered with Handle before Serve: a method table of
// api.Handler, each given a *Call (an api.Call) to answer at once or
// later (methods.go, call.go). The daemon registers the lanes' methods and
// its own.
//
// One connection:
//
//	reader goroutine --lines, at most 32 unhandled--> conn actor
//	conn actor, calls answered later, Bus sink --lines--> OutQueue --> writer goroutine
//
// The parts:
//
//   - The accept loop checks the peer's uid (SO_PEERCRED), emits
//     conn.opened, and asks the "conns" actor to spawn one "conn" actor.
//   - The reader goroutine reads bounded lines (wire.LineReader) and sends
//     each one, copied, to the conn actor. It takes a credit per line and the
//     actor gives it back once the line is answered, so a client that floods
//     the socket stalls in its own socket buffer instead of growing the
//     actor's mailbox. It also stops handing lines over while the client
//     leaves its responses unread, so a client that pipelines requests and
//     reads slowly is throttled, not disconnected.
//   - The conn actor parses requests and hands each to its method's
//     handler, which never blocks: a call it cannot answer at once is
//     answered later from whichever goroutine can (job.wait's when its job
//     ends), straight into the output queue, and the connection holds it
//     as pending until then. It is spawned Inline, so it runs on the
//     goroutine that sends to it (nearly always the reader): a request
//     costs no goroutine hand-off.
//   - OutQueue (outq.go) is a mutex-protected pair of FIFOs (responses, events) under one
//     bound. Bus.Emit delivers into it in O(1) on the emitter's goroutine. A
//     response queued alone, with no writer running, is written at once by
//     the goroutine that queued it, in one attempt that never blocks; what
//     the socket does not take goes back to the head of the queue. Otherwise
//     a writer goroutine, which exists only while there is something to
//     write, takes everything queued at once and writes it with one writev,
//     so an idle connection has no writer goroutine and no write buffer.
//     Responses are never dropped: a client whose unread responses alone
//     exceed the bound is disconnected. Events over the bound are dropped
//     oldest first and reported to the client as events.dropped once the
//     queue has room again, or close the connection, as Options.Overflow
//     says. The queue knows no protocol and no connection type: it writes
//     to a Writer (any stream socket of package net) for a QueueConn, so
//     another front-end's connections can use it as they are.
//
// Every way a connection ends leads to the conn actor's Stopped message
// (or, for a connection whose actor never started, to Server.Close), which
// unsubscribes, closes the pending calls (their OnClose functions run;
// when the daemon stops they are answered CodeShuttingDown), emits
// conn.closed with the first reason recorded, and lets the writer flush
// what is queued (bounded by flushTimeout) before the socket is closed.
package control
