// Package spool will drain clanker's IPC spool (.clanker/ipc-spool.ndjson:
// one {"ts","type","payload"} line per message, bounded to 1 MB with the
// oldest lines trimmed) on startup and on every tick, as specified in
// ../shared/specs/003_06e932a1a1119c10.txt. It is reserved by the layout
// and arrives with the clanker issue; nothing in the daemon uses it yet.
package spool
