// Package clanker is orchestrd's clanker domain: it takes the place of
// clanker's dashboard for the pods of each configured repository (spec
// ../shared/specs/003_06e932a1a1119c10.txt). It holds the [[clanker.repos]]
// config, the ports the daemon fills (Store, Listener), the Manager and
// one actor per repo that owns that repo's task state, the request
// handlers (hello among them), the clanker.* event kinds and the
// clanker.* methods. Pods reach a repo's actor through the repo's unix
// socket (the front-end, clanker/ipc, hands every request line to the
// repo's actor), and through the spool .clanker/ipc-spool.ndjson they
// append to while the socket is down, which the actor drains on start and
// on every tick.
//
// The truth of a repo's tasks is the state store; the .clanker directory
// (tasks/<id>.json, events.log, history/, heartbeat/, state.json) is
// written from it, atomically and by the repo's actor only, in the
// formats clanker's own tools read. A change is committed to the store
// before it is written out or answered, together with the spool position
// it came from and the lines it appends (an outbox), so a daemon killed
// at any point neither loses nor applies twice a request it answered or a
// spool line it read.
package clanker
