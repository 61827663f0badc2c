// Package executors runs Agor-style agent executors: pools of supervised
// processes that speak JSON-RPC 2.0 with the daemon over one unix socket
// each (../shared/specs/001_56f478f0f45f2aaf.txt). A pool is an actor;
// each executor process and each task is an actor under it. Executors ask
// the daemon for API keys (Secrets), for permission to use tools
// (Permissions, answered by the approvals domain) and stream what their
// agent does (report_message), which is committed to the store (Log) and
// published to subscribers, with pause/resume backpressure between.
package executors
