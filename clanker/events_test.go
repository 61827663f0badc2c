package clanker

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind the clanker domain emits is registered, sampled here, and
// logged as it promises.
func TestKinds(t *testing.T) {
	const repo = "/src/app"
	eventlogtest.CheckKinds(t,
		RepoStarted{Repo: repo, Socket: repo + "/.clanker/ipc.sock", Tasks: 3, Imported: 1},
		RepoFailed{Repo: repo, Error: "making clanker's socket: in use"},
		RepoStopped{Repo: repo},
		TaskCreated{Repo: repo, TaskID: "t1", Status: "queued", Replaced: true, Via: "ipc"},
		TaskImported{Repo: repo, TaskID: "t1", Status: "queued", Removed: true},
		TaskPrompted{Repo: repo, TaskID: "t1", Pod: "slave-1", Role: "slave", Status: "running", Resent: true},
		TaskStatus{Repo: repo, TaskID: "t1", From: "running", Status: "needs_judge", Pod: "slave-1", Via: "spool"},
		Handoff{Repo: repo, TaskID: "t1", Role: "slave", Via: "ipc"},
		Note{Repo: repo, TaskID: "t1", Role: "judge", Via: "ipc"},
		PodStale{Repo: repo, Pod: "slave-1", Role: "slave", Pid: 42, LastSeenMs: 31000},
		Paused{Repo: repo, Pod: "slave-1", Role: "slave", Message: "You've hit your usage limit.", Until: "2026-11-25T21:00:00Z"},
		Resumed{Repo: repo, Reason: "command", PausedMs: 1000},
		RequestRefused{Repo: repo, Type: "task_status", Error: "Missing taskId", Via: "ipc", LineBytes: 57, LineSHA256: "0b1e7d3c5f2a4e6b8c9d0a1b2c3d4e5f"},
		SpoolDrained{Repo: repo, Lines: 200, Applied: 199, Dead: 1, More: true},
		SpoolDeadLettered{Repo: repo, Type: "task_status", Error: "Task not found", LineBytes: 88, LineSHA256: "9f86d081884c7d659a2feaa0c55ad015"},
		WriteFailed{Repo: repo, Path: repo + "/.clanker/tasks/t1.json", Error: "no space left on device"},
		FileRefused{Repo: repo, Path: repo + "/.clanker/events.log", Reason: "is a symbolic link"},
	)
}
