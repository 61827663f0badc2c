package executors

import (
	"encoding/json"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind executors emits is registered, sampled here, and logged as
// it promises (task.message and task.progress are ephemeral).
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		TaskQueued{TaskID: "t-1", SessionID: "s-1", Executor: "claude"},
		TaskStarted{TaskID: "t-1", SessionID: "s-1", Executor: "claude", Instance: "claude-1", Pid: 42},
		TaskMessage{TaskID: "t-1", SessionID: "s-1 <é>", Sequence: 1, EventType: "content_block_delta",
			EventData: json.RawMessage(`{"delta":{"text":"hi \"there\" <&>"},
 "n": [1, 2.5e3]}`)},
		TaskProgress{TaskID: "t-1", Progress: json.RawMessage(`{"percent":50}`)},
		TaskErrorReported{TaskID: "t-1", Code: "TOOL_FAILED", Message: "grep: no such file"},
		TaskFinished{TaskID: "t-1", SessionID: "s-1", Executor: "claude", State: api.TaskFailed,
			Error: &api.TaskError{Code: api.TaskErrExecutorLost, Message: "exited"}, MessageCount: 3,
			TokenUsage: &api.TokenUsage{InputTokens: 10, OutputTokens: 5}},
		TaskPermissionRequested{TaskID: "t-1", ToolName: "Bash", ApprovalID: "a-1"},
		TaskPermissionDecided{TaskID: "t-1", ToolName: "Edit", Approved: true, Reason: "mode=acceptEdits"},
		TaskRecovered{TaskID: "t-1", PreviousState: api.TaskRunning},
		TaskSequencesSkipped{TaskID: "t-1", Executor: "claude-1", From: 2, To: 402, Missing: 200, Limit: 400},
		SecretIssued{TaskID: "t-1", Service: "anthropic", Executor: "claude-1", Pool: "claude", Entry: "ANTHROPIC_API_KEY"},
		SecretRefused{TaskID: "t-1", Service: "openai", Executor: "claude-1", Pool: "claude", Reason: "not_allowed"},
		ExecutorPeerRefused{Pool: "claude", Executor: "claude-1", Pid: 4242, PeerPid: 4300, PeerUID: 1000, Reason: "the process listening on /home/u/.orchestrd/executors/claude-1/executor.sock (pid 4300) is not the executor (pid 4242) nor its child"},
		ExecutorSpawned{Pool: "claude", Executor: "claude-1", Pid: 42, Socket: "/h/executors/claude-1/executor.sock", Transport: "socket"},
		ExecutorConnected{Pool: "claude", Executor: "claude-1", Pid: 42, StartMs: 30},
		ExecutorStartFailed{Pool: "claude", Executor: "claude-1", Reason: "no connection after 10s"},
		ExecutorExited{Pool: "claude", Executor: "claude-1", Pid: 42, Code: -1, Signal: "SIGKILL", Task: "t-1"},
		ExecutorRestartScheduled{Pool: "claude", DelayMs: 0, RestartsInWindow: 1, Policy: "stable_exit"},
		ExecutorPaused{Pool: "claude", Executor: "claude-1", Pending: 101},
		ExecutorResumed{Pool: "claude", Executor: "claude-1", Pending: 49},
		ExecutorBadToken{Pool: "claude", Executor: "claude-1", Method: "get_api_key"},
		ExecutorProtocolError{Pool: "claude", Executor: "claude-1", Problem: "not JSON"},
		ExecutorStopping{Pool: "claude", Executor: "claude-1", Reason: "idle_timeout", TimeoutMs: 5000},
		ExecutorKilled{Pool: "claude", Executor: "claude-1", Pid: 42, Reason: "startup_timeout"},
		TerminalOpened{TerminalID: "term-1", Pool: "claude", Executor: "claude-1", PtyPid: 43, Cwd: "/src", Cols: 80, Rows: 24},
		TerminalClosed{TerminalID: "term-1", Pool: "claude", Executor: "claude-1", PtyPid: 43, Reason: api.TermExited,
			BytesOut: 120, BytesIn: 7, DurationMs: 1500},
		TerminalOpenFailed{Pool: "claude", Executor: "claude-1", Reason: "executor claude-1 refused spawn_terminal"},
	)
}
