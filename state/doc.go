// Package state is the one owner of the daemon's durable state,
// <home>/state.db: an SQLite database (modernc.org/sqlite, pure Go) in WAL
// mode.
//
// # Writes and reads
//
// Every write goes through one writer goroutine that owns the only write
// connection. Writes are queued (bounded, Options.QueueSize); the writer
// takes everything queued (up to maxBatch writes) and commits it in one
// transaction, so many writes in the same millisecond cost one commit (group
// commit). A write returns, or calls its done function, only once its
// transaction has committed, or with an error saying what failed; a write
// that failed left nothing behind. Writes are applied in the order they were
// queued: the writes one goroutine enqueues keep their order.
//
// Reads use a pool of separate read-only connections and never wait on the
// writer: in WAL mode a reader sees the last committed state while a write
// transaction is open.
//
// # Durability
//
// Options.Durability "process" (the default) is synchronous=NORMAL: a commit
// is in the WAL file (the kernel's page cache) when it is acknowledged, so
// it survives kill -9 of the daemon but not necessarily a power loss or a
// kernel crash. "power" is synchronous=FULL: the WAL is fsynced on every
// commit, which survives power loss too and costs an fsync per group commit.
//
// # Schema
//
// The schema is versioned with PRAGMA user_version and migrated in code
// (schema.go): a newer orchestrd upgrades an older file at Open, each
// migration in a transaction of its own; an older one refuses a newer file
// with a *SchemaError naming the file and both versions. The tables, for a
// person with the sqlite3 tool (`sqlite3 ~/.orchestrd/state.db`):
//
//	meta  key TEXT PRIMARY KEY, value TEXT
//	      node_id      this home's stable id (32 hex digits, made at first open)
//	      opened_at    when a daemon last opened the file
//	      <counters>   ranges handed out by Meta.Reserve (the event log's seq)
//
//	jobs  one row per job, in submission order
//	      seq            INTEGER PRIMARY KEY: submission order, the paging cursor
//	      id, lane, state           state: queued dispatched running | succeeded
//	                                failed timeout cancelled error
//	      created_at, dispatched_at, finished_at
//	                                UTC text, 2006-01-02T15:04:05.000000Z;
//	                                finished_at is set iff the state is terminal
//	      runner_id, runner_pid     the runner it was dispatched to
//	      exit_code, signal, error, was_timeout, was_cancelled, duration_ms
//	      output_bytes, output_truncated
//	                                every byte the job wrote / whether output
//	                                keeps only the first max_output_bytes
//	      command, argv, cwd        argv is JSON text
//	      output BLOB               the kept output, byte for byte
//
//	job_specs  the rest of the spec of each unfinished job, enough to run a
//	      queued job again after a crash; a trigger deletes it when the job
//	      finishes (a job's state changes do not rewrite it: stdin can be
//	      512 KiB)
//	      seq                       the job's seq in jobs
//	      worktree_dir, env, timeout_ms, max_output_bytes, file_paths,
//	      agent_id, tool_name, stdin, stdin_b64, kill_grace_ms, stdin_stream,
//	      secrets
//	                                env, file_paths and secrets are JSON text
//	                                (secrets: variable -> secret name, never a
//	                                value), stdin and stdin_b64 BLOBs
//
//	approvals  one row per approval (schema version 2), pending or finished
//	      id, request_id            request_id: the hook's, approval.get takes it
//	      source, kind, state       state: pending | allowed denied always_allowed
//	                                replied timed_out cancelled
//	      tool_name, tool_input, cwd, session_id, task_id,
//	      permission_suggestions, assistant_context, content, specs
//	                                JSON fields as the text they came as
//	      created_at, deadline, resolved_at
//	                                resolved_at is set iff the state is terminal
//	      loop_id                   the loop a plan or merge approval is of
//	                                (schema version 15)
//	      decision, message, user_message, suggestion, suggestion_index,
//	      resolved_by, rule_id, reason, resolved_session, resolved_pid
//	                                the resolution; resolved_by the door
//	                                (cli, control, ui) or rule, timeout,
//	                                daemon, requester; resolved_session the
//	                                dashboard session's short id,
//	                                resolved_pid a control client's pid
//	                                (schema version 11)
//
//	approval_rules  the rules AlwaysAllow recorded
//	      id, origin, tool, input_field, input_pattern, cwd, session_id,
//	      content, decision, message, suggestion, from_approval, created_at
//
//	http_context  Loopsy's shared context (schema version 5), one row per key
//	      key, entry, expires       entry: the JSON the API answers with;
//	                                expires: Unix ms, 0 for never
//
//	http_peers  the Loopsy peers this node knows
//	      node_id, peer             peer: the JSON /peers answers with
//
//	ui_sessions  the dashboard's signed-in sessions (schema version 16)
//	      token_hash, id, key_id,   token_hash: the HMAC of the session's
//	      created, expires          token under the API key (never the
//	                                token); key_id: which key; Unix ms
//
// For example:
//
//	sqlite3 -header -column state.db \
//	  "select id, lane, state, exit_code, finished_at from jobs order by seq desc limit 20"
//	sqlite3 state.db "select id, env from jobs join job_specs using (seq)"   # unfinished
//
// Times are stored with microsecond precision; a record read back has its
// times truncated to the microsecond, in UTC.
package state
