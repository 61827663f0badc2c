// Package fleetrun is the harness of the tests that run a fleet of real
// daemons on one machine: the ports its servers listen on, a node's
// [cluster] table, and an operator's NATS servers (Debian's nats-server)
// whose users are the fleet's nodes. cmd/orchestrd's fleet tests and the
// dashboard's browser tests (daemon/ui/uitest) start their fleets with it.
package fleetrun
