// Package actors is orchestrd's only door to protoactor-go. Everything above
// it (lanes, supervisor, the control socket) sees small types of its own:
// Ref, Props, Context, the lifecycle messages, a panic hook and a live tree.
//
// What it adds to protoactor:
//   - Panics are caught with their stack and handed to the parent's strategy,
//     which reports them through Options.OnPanic and then restarts or stops
//     the child as its Props say; a panic never reaches the runtime.
//   - Every actor has a kind, an id, a state string and a restart count, kept
//     in a registry that Tree() snapshots for `tree.get`.
//   - Timers (After, Every) are plain time.Timers that message Self() and are
//     cancelled when the actor stops (protoactor's SetReceiveTimeout is racy
//     and fires once).
//   - protoactor's slog output is routed into zerolog.
//
// Mailboxes are protoactor's unbounded default: the actors here never
// receive from the outside world without a bound being applied before the
// message is sent (see lanes and the control socket for where).
package actors
