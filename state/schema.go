package state

// A migration takes the file from version-1 to version. Migrations only ever
// get appended: a released one never changes, since files out there were
// made by it. A later issue adding a domain (approvals, executor sessions,
// clanker tasks, context) appends one that creates its tables.
type migration struct {
	version int
	name    string
	sql     string
}

// (The CHECKs are written with OR, not IN: SQLite builds a temporary
// b-tree for an IN list on every row it checks.)
var migrations = []migration{
	{version: 1, name: "meta and jobs", sql: `
CREATE TABLE meta (
	key   TEXT PRIMARY KEY NOT NULL,
	value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE jobs (
	seq              INTEGER PRIMARY KEY,
	id               TEXT NOT NULL UNIQUE,
	lane             TEXT NOT NULL,
	state            TEXT NOT NULL CHECK (state = 'queued' OR state = 'dispatched' OR state = 'running' OR
	                   state = 'succeeded' OR state = 'failed' OR state = 'timeout' OR state = 'cancelled' OR
	                   state = 'error'),
	created_at       TEXT NOT NULL,
	dispatched_at    TEXT,
	finished_at      TEXT CHECK ((finished_at IS NULL) = (state = 'queued' OR state = 'dispatched' OR state = 'running')),
	runner_id        TEXT,
	runner_pid       INTEGER,
	exit_code        INTEGER,
	signal           TEXT,
	error            TEXT,
	was_timeout      INTEGER NOT NULL DEFAULT 0,
	was_cancelled    INTEGER NOT NULL DEFAULT 0,
	duration_ms      INTEGER NOT NULL DEFAULT 0,
	output_bytes     INTEGER NOT NULL DEFAULT 0,
	output_truncated INTEGER NOT NULL DEFAULT 0,
	command          TEXT,
	argv             TEXT,
	cwd              TEXT,
	output           BLOB
);

-- The finished jobs in the order pruning takes them.
CREATE INDEX jobs_finished ON jobs(finished_at) WHERE finished_at IS NOT NULL;

-- The rest of an unfinished job's spec, kept until it finishes: what a
-- restart needs to run a queued job again. Apart from jobs so that a job's
-- state changes do not rewrite it (stdin can be 512 KiB).
CREATE TABLE job_specs (
	seq              INTEGER PRIMARY KEY,
	worktree_dir     TEXT,
	env              TEXT,
	timeout_ms       INTEGER,
	max_output_bytes INTEGER,
	file_paths       TEXT,
	agent_id         TEXT,
	tool_name        TEXT,
	stdin            BLOB,
	stdin_b64        BLOB
);

CREATE TRIGGER job_specs_finished AFTER UPDATE OF finished_at ON jobs WHEN NEW.finished_at IS NOT NULL
BEGIN
	DELETE FROM job_specs WHERE seq = NEW.seq;
END;

CREATE TRIGGER job_specs_deleted AFTER DELETE ON jobs
BEGIN
	DELETE FROM job_specs WHERE seq = OLD.seq;
END;
`},
	{version: 2, name: "approvals and approval rules", sql: `
CREATE TABLE approvals (
	id                     TEXT PRIMARY KEY NOT NULL,
	request_id             TEXT,
	source                 TEXT NOT NULL,
	kind                   TEXT NOT NULL,
	state                  TEXT NOT NULL CHECK (state = 'pending' OR state = 'allowed' OR state = 'denied' OR
	                         state = 'always_allowed' OR state = 'replied' OR state = 'timed_out' OR
	                         state = 'cancelled'),
	tool_name              TEXT,
	tool_input             TEXT,
	cwd                    TEXT,
	session_id             TEXT,
	task_id                TEXT,
	permission_suggestions TEXT,
	assistant_context      TEXT,
	content                TEXT,
	specs                  TEXT,
	created_at             TEXT NOT NULL,
	deadline               TEXT,
	resolved_at            TEXT CHECK ((resolved_at IS NULL) = (state = 'pending')),
	decision               TEXT,
	message                TEXT,
	user_message           TEXT,
	suggestion             TEXT,
	suggestion_index       INTEGER,
	resolved_by            TEXT,
	rule_id                TEXT,
	reason                 TEXT
);

-- What a restart takes over, oldest first.
CREATE INDEX approvals_pending ON approvals(created_at) WHERE state = 'pending';
-- History, newest first.
CREATE INDEX approvals_created ON approvals(created_at);
-- The finished approvals in the order pruning takes them.
CREATE INDEX approvals_resolved ON approvals(resolved_at) WHERE resolved_at IS NOT NULL;
-- approval.get takes the hook's request_id as the id.
CREATE INDEX approvals_request_id ON approvals(request_id) WHERE request_id IS NOT NULL;

CREATE TABLE approval_rules (
	id            TEXT PRIMARY KEY NOT NULL,
	origin        TEXT NOT NULL,
	tool          TEXT NOT NULL,
	input_field   TEXT,
	input_pattern TEXT,
	cwd           TEXT,
	session_id    TEXT,
	content       TEXT,
	decision      TEXT NOT NULL CHECK (decision = 'allow' OR decision = 'deny'),
	message       TEXT,
	suggestion    TEXT,
	from_approval TEXT,
	created_at    TEXT NOT NULL
);
`},
	{version: 3, name: "executor sessions, tasks and their messages", sql: `
CREATE TABLE sessions (
	id         TEXT PRIMARY KEY NOT NULL,
	executor   TEXT NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL
);
CREATE TABLE tasks (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	id          TEXT UNIQUE NOT NULL,
	session_id  TEXT NOT NULL,
	executor    TEXT NOT NULL,
	state       TEXT NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'completed' OR
	              state = 'failed' OR state = 'cancelled' OR state = 'timeout'),
	record      TEXT NOT NULL,
	created_at  TEXT NOT NULL,
	finished_at TEXT
);
CREATE INDEX tasks_session ON tasks(session_id, seq);
CREATE INDEX tasks_state ON tasks(state);
CREATE TABLE task_messages (
	task_id     TEXT NOT NULL,
	sequence    INTEGER NOT NULL,
	session_id  TEXT NOT NULL,
	event_type  TEXT NOT NULL,
	event_data  TEXT,
	ts          INTEGER,
	received_at TEXT NOT NULL,
	PRIMARY KEY (task_id, sequence)
) WITHOUT ROWID;
CREATE INDEX task_messages_session ON task_messages(session_id);
`},
	{version: 4, name: "clanker repos: tasks, repo state, outbox", sql: `
CREATE TABLE clanker_tasks (
	repo      TEXT NOT NULL,
	id        TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	record    TEXT NOT NULL,
	projected TEXT NOT NULL DEFAULT '',
	created   TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (repo, id)
) WITHOUT ROWID;
CREATE TABLE clanker_repos (
	repo  TEXT PRIMARY KEY NOT NULL,
	state TEXT NOT NULL
);
CREATE TABLE clanker_outbox (
	repo TEXT NOT NULL,
	seq  INTEGER NOT NULL,
	file TEXT NOT NULL,
	mode TEXT NOT NULL CHECK (mode = 'append' OR mode = 'replace'),
	data TEXT NOT NULL,
	PRIMARY KEY (repo, seq)
) WITHOUT ROWID;
`},
	{version: 5, name: "Loopsy's shared context and peers", sql: `
CREATE TABLE http_context (
	key     TEXT PRIMARY KEY NOT NULL,
	entry   TEXT NOT NULL,
	expires INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX http_context_expires ON http_context(expires) WHERE expires > 0;
CREATE TABLE http_peers (
	node_id TEXT PRIMARY KEY NOT NULL,
	peer    TEXT NOT NULL
) WITHOUT ROWID;
`},
	// An executor reports messages by the thousand a second: a row per
	// message cost the store more than everything else on their path. A
	// row now holds the messages of one commit for one task, as a JSON
	// array of {sequence, event_type, ts, received_at, event_data} (each
	// event_data the bytes it came as). The view task_messages shows them
	// a message a row, as the old table did, for whoever looks with
	// sqlite3. Old rows move over byte for byte, one message a row.
	{version: 6, name: "executor messages kept a commit a row", sql: `
CREATE TABLE task_message_batches (
	id         INTEGER PRIMARY KEY,
	task_id    TEXT NOT NULL,
	session_id TEXT NOT NULL,
	first_seq  INTEGER NOT NULL,
	last_seq   INTEGER NOT NULL,
	count      INTEGER NOT NULL,
	messages   TEXT NOT NULL
);
CREATE INDEX task_message_batches_session ON task_message_batches(session_id, task_id, last_seq);
INSERT INTO task_message_batches(task_id, session_id, first_seq, last_seq, count, messages)
	SELECT task_id, session_id, sequence, sequence, 1,
		'[{"sequence":' || sequence || ',"event_type":' || json_quote(event_type) ||
		CASE WHEN ts IS NULL THEN '' ELSE ',"ts":' || ts END ||
		',"received_at":' || json_quote(received_at) ||
		CASE WHEN event_data IS NULL THEN '' ELSE ',"event_data":' || event_data END || '}]'
	FROM task_messages ORDER BY task_id, sequence;
DROP TABLE task_messages;
CREATE VIEW task_messages AS
	SELECT b.task_id, json_extract(m.value, '$.sequence') AS sequence, b.session_id,
		json_extract(m.value, '$.event_type') AS event_type, json_extract(m.value, '$.event_data') AS event_data,
		json_extract(m.value, '$.ts') AS ts, json_extract(m.value, '$.received_at') AS received_at
	FROM task_message_batches b, json_each(b.messages) m;
`},
	// A job's kill grace (kept with its spec, for a job run again after a
	// restart) and how a cancelled or timed-out job was stopped.
	{version: 7, name: "jobs' kill grace and stopped_by", sql: `
ALTER TABLE job_specs ADD COLUMN kill_grace_ms INTEGER;
ALTER TABLE jobs ADD COLUMN stopped_by TEXT CHECK (stopped_by IS NULL OR stopped_by = 'sigterm' OR stopped_by = 'sigkill');
`},
	// A job whose stdin a client streams (job.stdin): not durable, so a
	// queued one is failed stdin_lost after a crash.
	{version: 8, name: "a job's streamed stdin", sql: `
ALTER TABLE job_specs ADD COLUMN stdin_stream INTEGER NOT NULL DEFAULT 0;
`},
	// Loopr's loops: each loop's record whole as JSON beside the columns
	// the queries need (its tree by parent_id), and each iteration's.
	{version: 9, name: "loops and their iterations", sql: `
CREATE TABLE loops (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT UNIQUE NOT NULL,
	parent_id  TEXT,
	loop_type  TEXT NOT NULL CHECK (loop_type = 'plan' OR loop_type = 'spec' OR loop_type = 'phase' OR loop_type = 'code'),
	status     TEXT NOT NULL CHECK (status = 'pending' OR status = 'running' OR status = 'paused' OR
	             status = 'rebasing' OR status = 'complete' OR status = 'failed' OR status = 'invalidated'),
	record     TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX loops_parent ON loops(parent_id, seq);
CREATE INDEX loops_status ON loops(status);
CREATE TABLE loop_iterations (
	loop_id   TEXT NOT NULL,
	iteration INTEGER NOT NULL,
	status    TEXT NOT NULL,
	record    TEXT NOT NULL,
	PRIMARY KEY (loop_id, iteration)
) WITHOUT ROWID;
`},
	// A job whose output the runner stopped reading while something that
	// outlived the job still held it open (Result.output_cut).
	{version: 10, name: "a job's cut output", sql: `
ALTER TABLE jobs ADD COLUMN output_cut INTEGER NOT NULL DEFAULT 0;
`},
	// Who resolved an approval, beside resolved_by (cli, control, ui...):
	// the dashboard's session, a control client's pid.
	{version: 11, name: "who resolved an approval", sql: `
ALTER TABLE approvals ADD COLUMN resolved_session TEXT;
ALTER TABLE approvals ADD COLUMN resolved_pid INTEGER;
`},
	// The secrets an unfinished job is given by name (run --secret): the
	// variables and the names of secrets.toml they take, never a value.
	{version: 12, name: "the names of a job's secrets", sql: `
ALTER TABLE job_specs ADD COLUMN secrets TEXT;
`},
	// A built-in agent's own session id (Claude Code's session_id,
	// Codex's thread): the next task of the orchestrd session resumes it.
	{version: 13, name: "an executor session's agent session id", sql: `
ALTER TABLE sessions ADD COLUMN sdk_session_id TEXT;
`},
	// A running job's output as it streams (issue 39): the kept bytes
	// (max_output_bytes) written a piece at a time, at most once a second,
	// so that a daemon killed mid-job leaves them, and the next one puts
	// them in the job's record (daemon_lost). A piece is the bytes at off
	// in the kept output; total is what the job had written by then. Gone
	// once the job finishes: its record has the output whole.
	{version: 14, name: "a running job's streamed output", sql: `
CREATE TABLE job_output (
	seq   INTEGER NOT NULL,
	off   INTEGER NOT NULL,
	total INTEGER NOT NULL,
	data  BLOB NOT NULL,
	PRIMARY KEY (seq, off)
);

CREATE TRIGGER job_output_finished AFTER UPDATE OF finished_at ON jobs WHEN NEW.finished_at IS NOT NULL
BEGIN
	DELETE FROM job_output WHERE seq = NEW.seq;
END;

CREATE TRIGGER job_output_deleted AFTER DELETE ON jobs
BEGIN
	DELETE FROM job_output WHERE seq = OLD.seq;
END;
`},
	// The loop an approval is of (issue 39): a plan's or a merge's, as
	// the plan.* events name it to Loopr's client.
	{version: 15, name: "the loop an approval is of", sql: `
ALTER TABLE approvals ADD COLUMN loop_id TEXT;
`},
	// The dashboard's signed-in sessions, so a sign-in outlives a restart:
	// a session's token is never stored, only its HMAC under the API key
	// (token_hash), and key_id tells which key (a session of another key
	// is dropped). Times are Unix milliseconds.
	{version: 16, name: "the dashboard's sessions", sql: `
CREATE TABLE ui_sessions (
	token_hash BLOB PRIMARY KEY NOT NULL,
	id         TEXT NOT NULL,
	key_id     TEXT NOT NULL,
	created    INTEGER NOT NULL,
	expires    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX ui_sessions_expires ON ui_sessions(expires);
`},
	// What a job's process tree cost (api.Usage, JSON), sampled while it
	// ran; NULL when nothing was sampled.
	{version: 17, name: "what a job cost", sql: `
ALTER TABLE jobs ADD COLUMN usage TEXT;
`},
	// The Telegram bot's place in its updates (the next getUpdates offset:
	// a restart neither loses nor replays a tap) and the messages it sent
	// of each approval, a chat a row (nothing is sent twice; each is
	// edited with the outcome, then forgotten). token is the approval's
	// short id in the buttons' callback data.
	{version: 18, name: "the Telegram bot's offset and messages", sql: `
CREATE TABLE telegram_offset (
	id   INTEGER PRIMARY KEY CHECK (id = 1),
	next INTEGER NOT NULL
);
CREATE TABLE telegram_messages (
	approval_id TEXT NOT NULL,
	chat_id     INTEGER NOT NULL,
	message_id  INTEGER NOT NULL,
	token       TEXT NOT NULL,
	PRIMARY KEY (approval_id, chat_id)
) WITHOUT ROWID;
`},
}

// SchemaVersion is the schema version this build writes and the newest it
// can open.
func SchemaVersion() int { return migrations[len(migrations)-1].version }
