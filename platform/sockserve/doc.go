// Package sockserve is the one unix-socket server of the daemon: every
// socket the daemon serves (the control socket, vibe-reachout's hook
// socket, clanker's pod sockets, the lanes' runner sockets) is made,
// accepted, checked, framed, written and closed here, and the front-end
// keeps only its protocol.
//
// What it owns:
//
//   - Listen: the socket made as proc.ListenUnix makes it (0600 from the
//     start, a stale socket replaced, a live one or a non-socket refused),
//     in a directory made and forced to its mode, or bound through a
//     directory's descriptor so no link on the path is followed.
//   - Server: the accept loop with backoff (out of descriptors and the
//     like never spin nor end the listener; each failure logged as a
//     warning, "accept failed"), the registry of open connections with a limit,
//     the peer check (the daemon's uid, then the front-end's own Admit),
//     a refused peer's one line and conn.refused, each connection an
//     actor under the front-end's connections supervisor (Supervisor),
//     whose one goroutine runs the front-end's Serve (a panic there is
//     the actor's: that connection alone ends), and Close: stop
//     accepting, interrupt every connection (Interrupt), wait for them
//     at most a grace, then close what is left and wait for every
//     goroutine.
//   - Lines: NDJSON line framing with a maximum line length, reading the
//     socket without holding a buffer while the connection is idle.
//   - StreamHandler: an HTTP front-end's long-lived stream as an actor
//     under its Supervisor; List: the connections (kind, peer, age,
//     bytes queued) for frontend.list.
//   - OutQueue: the bounded, non-blocking outbound queue of a
//     connection that streams many lines (responses never dropped, events
//     dropped oldest first or the connection closed), so a slow client
//     never stalls the daemon.
//
// It knows no protocol and no domain; it tells the event bus (conn.refused),
// the actor system (its actors' panics) and the front-end (Serve, Admit,
// Interrupt, Panicked, Linked) and nobody else.
package sockserve
