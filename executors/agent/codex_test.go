package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/modelfake"
)

// codexBinary is the pinned Codex CLI, or the test is skipped saying why.
func codexBinary(t *testing.T) string {
	t.Helper()
	argv, err := modelfake.CLI("codex")
	if err != nil {
		t.Skip(err)
	}
	return argv[0]
}

type codexEnv struct {
	bin, state, cwd string
	extra           []string
	fake            *modelfake.OpenAI
}

func newCodexEnv(t *testing.T, turns ...modelfake.OpenAITurn) *codexEnv {
	t.Helper()
	bin := codexBinary(t)
	// Last of the cleanups: nothing of the adapter's is left running.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	fake, err := modelfake.NewOpenAI(turns...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	// Not under /tmp: Codex refuses to make its helper links there.
	base := t.TempDir()
	e := &codexEnv{bin: bin, state: filepath.Join(base, "state"), cwd: filepath.Join(base, "work"), fake: fake}
	if err := os.MkdirAll(e.cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *codexEnv) run(t *testing.T, h *testHost, mod func(*Task)) Result {
	t.Helper()
	a, err := New(KindCodex, Options{Argv: append([]string{e.bin}, e.extra...), StateDir: e.state, Model: "gpt-5.5"})
	if err != nil {
		t.Fatal(err)
	}
	task := Task{ID: "t-1", Prompt: "do the thing", Cwd: e.cwd, Proc: &Proc{},
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(e.state), "OPENAI_BASE_URL=" + e.fake.URL}}
	if mod != nil {
		mod(&task)
	}
	done := make(chan Result, 1)
	go func() { done <- a.Run(task, h) }()
	select {
	case r := <-done:
		// Codex and what it ran are gone with the task.
		// (A killed child is a zombie until whoever it was left to reaps
		// it: a zombie is gone.)
		if p := task.Proc.cmd; p != nil && p.Process != nil {
			deadline := time.Now().Add(10 * time.Second)
			for live := liveInGroup(p.Process.Pid); len(live) > 0; live = liveInGroup(p.Process.Pid) {
				if time.Now().After(deadline) {
					t.Errorf("codex's process group is still there 10 s after the task: %q", live)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		return r
	case <-time.After(2 * time.Minute):
		task.Proc.Kill()
		t.Fatal("codex's task did not end within 2 minutes")
		return Result{}
	}
}

// liveInGroup lists the processes of group pgid that are not zombies.
func liveInGroup(pgid int) []string {
	var live []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			live = append(live, string(b[:i+1]))
		}
	}
	return live
}

func codexTouchCall(name string) modelfake.OpenAICall {
	return modelfake.OpenAICall{Name: "exec_command", Args: map[string]any{"cmd": "touch " + name, "login": false, "yield_time_ms": 60000}}
}

func TestCodexTextUsageAndKey(t *testing.T) {
	e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "exec_command", Args: map[string]any{"cmd": "env", "login": false, "yield_time_ms": 60000}}}},
		modelfake.OpenAITurn{Reasoning: "thinking hard", Text: "Hello from the scripted model.",
			Usage: &modelfake.OpenAIUsage{Input: 300, Cached: 100, Output: 40}})
	h := &testHost{key: "sk-test-123", decide: func(string, json.RawMessage) Decision { return Decision{Approved: true} }}
	res := e.run(t, h, nil)
	if res.Status != "completed" || res.Error != nil {
		t.Fatalf("result %+v %+v, errors %v", res, res.Error, h.errs)
	}
	if got := h.texts(); got != "Hello from the scripted model." {
		t.Errorf("text deltas %q", got)
	}
	if n := len(h.of(api.MsgText)); n < 3 {
		t.Errorf("%d text messages: the text did not stream in pieces", n)
	}
	if th := h.of(api.MsgThinking); len(th) == 0 {
		t.Error("no thinking message")
	}
	if res.SDKSessionID == "" {
		t.Error("no sdk session id (the thread)")
	}
	if u := res.Usage; u == nil || u.InputTokens != 90+200 || u.CacheReadTokens != 10+100 || u.OutputTokens != 20+40 {
		t.Errorf("usage %+v", res.Usage)
	}
	rs := h.of(api.MsgResult)
	if len(rs) != 1 || rs[0]["text"] != "Hello from the scripted model." || rs[0]["sdk_session_id"] != res.SDKSessionID {
		t.Errorf("result messages %v", rs)
	}
	reqs := e.fake.Conversation()
	if len(reqs) != 2 {
		t.Fatalf("%d requests (a request sent again counted once)", len(reqs))
	}
	// The command's environment has not the key.
	if out := reqs[1].LastOutput(); !strings.Contains(out, "CODEX_HOME=") || strings.Contains(out, "sk-test-123") {
		t.Errorf("the command's env:\n%s", out)
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer sk-test-123" {
		t.Errorf("Authorization %q", got)
	}
	if reqs[0].Model != "gpt-5.5" || !strings.Contains(reqs[0].Text(), "do the thing") {
		t.Errorf("request model %q, text %q", reqs[0].Model, reqs[0].Text())
	}
	if !strings.Contains(strings.Join(h.keyAsks, ","), "openai") {
		t.Errorf("key asked for %v", h.keyAsks)
	}
	if _, err := os.Stat(filepath.Join(e.state, "sessions")); err != nil {
		t.Errorf("codex's sessions are not in the state dir: %v", err)
	}
}

func TestCodexApproveDenyAndResume(t *testing.T) {
	e := newCodexEnv(t,
		modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("approved.txt")}},
		modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("denied.txt")}},
		modelfake.OpenAITurn{Text: "first done"},
		modelfake.OpenAITurn{Text: "second done"})
	h := &testHost{key: "k", decide: func(tool string, in json.RawMessage) Decision {
		if strings.Contains(string(in), "denied.txt") {
			return Decision{Reason: "user_denied: not that file"}
		}
		return Decision{Approved: true}
	}}
	res := e.run(t, h, nil)
	if res.Status != "completed" || res.Denied != 1 {
		t.Fatalf("result %+v %+v, errors %v", res, res.Error, h.errs)
	}
	if _, err := os.Stat(filepath.Join(e.cwd, "approved.txt")); err != nil {
		t.Errorf("the approved command did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.cwd, "denied.txt")); err == nil {
		t.Error("the denied command ran")
	}
	if len(h.asked) != 2 || !strings.HasPrefix(h.asked[0], `Bash {"command":"touch approved.txt"`) {
		t.Errorf("asked %q", h.asked)
	}
	pd := h.of(api.MsgPermissionDenied)
	if len(pd) != 1 || pd[0]["name"] != "Bash" || !strings.Contains(pd[0]["reason"].(string), "not that file") {
		t.Errorf("permission_denied %v", pd)
	}
	calls, results := h.of(api.MsgToolCall), h.of(api.MsgToolResult)
	if len(calls) != 2 || len(results) != 2 || results[0]["is_error"] == true || results[1]["is_error"] != true {
		t.Errorf("tool calls %v\nresults %v", calls, results)
	}
	reqs := e.fake.Conversation()
	if len(reqs) != 3 {
		t.Fatalf("%d requests (a request sent again counted once)", len(reqs))
	}
	if txt := reqs[2].Text(); !strings.Contains(txt, "rejected") || !strings.Contains(txt, "not that file") {
		t.Errorf("the model's request after the denial does not carry it:\n%s", txt)
	}
	// A second prompt resumes the thread: the model gets the history.
	h2 := &testHost{key: "k"}
	res2 := e.run(t, h2, func(t *Task) { t.Resume, t.Prompt = res.SDKSessionID, "and now the second" })
	if res2.Status != "completed" || res2.SDKSessionID != res.SDKSessionID {
		t.Fatalf("second result %+v (first thread %s), errors %v", res2, res.SDKSessionID, h2.errs)
	}
	reqs = e.fake.Requests()
	if txt := reqs[len(reqs)-1].Text(); !strings.Contains(txt, "do the thing") || !strings.Contains(txt, "first done") ||
		!strings.Contains(txt, "and now the second") {
		t.Errorf("the resumed prompt's request lacks the history:\n%s", txt)
	}
}

func TestCodexModes(t *testing.T) {
	patch := modelfake.OpenAICall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: patched.txt\n+hi\n*** End Patch\n"}
	t.Run("acceptEdits", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{patch}},
			modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("cmd.txt")}}, modelfake.OpenAITurn{Text: "ok"})
		h := &testHost{key: "k"} // denies whatever it is asked
		res := e.run(t, h, func(t *Task) { t.PermissionMode = api.ModeAcceptEdits })
		if res.Status != "completed" || res.Denied != 1 {
			t.Fatalf("result %+v %+v", res, res.Error)
		}
		if _, err := os.Stat(filepath.Join(e.cwd, "patched.txt")); err != nil {
			t.Errorf("the file change was not accepted: %v", err)
		}
		if _, err := os.Stat(filepath.Join(e.cwd, "cmd.txt")); err == nil {
			t.Error("the command ran without being asked")
		}
		if len(h.asked) != 1 || !strings.HasPrefix(h.asked[0], "Bash ") {
			t.Errorf("asked %q", h.asked)
		}
	})
	t.Run("acceptEdits asks outside the task's directory", func(t *testing.T) {
		var e *codexEnv
		e = newCodexEnv(t, modelfake.OpenAITurn{Func: func(modelfake.OpenAIRequest) modelfake.OpenAITurn {
			return modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "apply_patch",
				Input: "*** Begin Patch\n*** Add File: " + filepath.Join(e.state, "config.toml") + "\n+notify = [\"sh\", \"-c\", \"touch /tmp/pwned\"]\n*** End Patch\n"}}}
		}}, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{{Name: "apply_patch",
			Input: "*** Begin Patch\n*** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n*** End Patch\n"}}}, modelfake.OpenAITurn{Text: "ok"})
		h := &testHost{key: "k"} // denies whatever it is asked
		res := e.run(t, h, func(t *Task) { t.PermissionMode = api.ModeAcceptEdits })
		if res.Status != "completed" || res.Denied != 2 || len(h.asked) != 2 {
			t.Fatalf("result %+v %+v, asked %q", res, res.Error, h.asked)
		}
		if b, err := os.ReadFile(filepath.Join(e.state, "config.toml")); err == nil && strings.Contains(string(b), "pwned") {
			t.Error("acceptEdits wrote codex's config without asking")
		}
		if _, err := os.Stat(filepath.Join(e.cwd, ".git/hooks/pre-commit")); err == nil {
			t.Error("acceptEdits wrote a git hook without asking")
		}
	})
	t.Run("default asks for a file change", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{patch}}, modelfake.OpenAITurn{Text: "ok"})
		h := &testHost{key: "k"}
		res := e.run(t, h, nil)
		if res.Status != "completed" || res.Denied != 1 {
			t.Fatalf("result %+v %+v", res, res.Error)
		}
		if len(h.asked) != 1 || !strings.HasPrefix(h.asked[0], `apply_patch {"changes":[{"path":`) || !strings.Contains(h.asked[0], "patched.txt") {
			t.Errorf("asked %q", h.asked)
		}
		if _, err := os.Stat(filepath.Join(e.cwd, "patched.txt")); err == nil {
			t.Error("the denied file change was made")
		}
	})
	t.Run("bypassPermissions", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("bypass.txt")}}, modelfake.OpenAITurn{Text: "ok"})
		h := &testHost{key: "k"}
		res := e.run(t, h, func(t *Task) { t.PermissionMode = api.ModeBypass })
		if res.Status != "completed" || len(h.asked) != 0 {
			t.Fatalf("result %+v, asked %q", res, h.asked)
		}
		if _, err := os.Stat(filepath.Join(e.cwd, "bypass.txt")); err != nil {
			t.Errorf("bypass did not run the command: %v", err)
		}
	})
	t.Run("plan", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{patch}},
			modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("plan.txt")}}, modelfake.OpenAITurn{Text: "ok"})
		h := &testHost{key: "k", decide: func(string, json.RawMessage) Decision { return Decision{Approved: true} }}
		res := e.run(t, h, func(t *Task) { t.PermissionMode = api.ModePlan })
		if res.Status != "completed" || res.Denied != 2 || len(h.asked) != 0 {
			t.Fatalf("result %+v, asked %q", res, h.asked)
		}
		for _, f := range []string{"patched.txt", "plan.txt"} {
			if _, err := os.Stat(filepath.Join(e.cwd, f)); err == nil {
				t.Errorf("plan mode made %s", f)
			}
		}
	})
	t.Run("tools", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("notool.txt")}}, modelfake.OpenAITurn{Text: "ok"})
		h := &testHost{key: "k", decide: func(string, json.RawMessage) Decision { return Decision{Approved: true} }}
		res := e.run(t, h, func(t *Task) { t.Tools = []string{"Read", "apply_patch"} })
		if res.Denied != 1 || len(h.asked) != 0 {
			t.Fatalf("result %+v, asked %q", res, h.asked)
		}
		if _, err := os.Stat(filepath.Join(e.cwd, "notool.txt")); err == nil {
			t.Error("a command ran though Bash is not one of the task's tools")
		}
	})
}

func TestCodexFailures(t *testing.T) {
	t.Run("429", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Status: 429})
		h := &testHost{key: "k"}
		start := time.Now()
		res := e.run(t, h, nil)
		if res.Status != "failed" || res.Error == nil || res.Error.Code != api.TaskErrUsageLimit {
			t.Fatalf("result %+v %+v", res, res.Error)
		}
		if n := len(e.fake.Requests()); n > 2 {
			t.Errorf("codex asked %d times after a 429", n)
		}
		if rs := h.of(api.MsgResult); len(rs) != 1 || rs[0]["is_error"] != true || !strings.HasPrefix(fmt.Sprint(rs[0]["text"]), "usage_limit: ") {
			t.Errorf("result messages %v", rs)
		}
		t.Logf("ended in %s", time.Since(start))
	})
	t.Run("usage limit", func(t *testing.T) {
		resets := time.Now().Add(2 * time.Hour).Unix()
		e := newCodexEnv(t, modelfake.OpenAITurn{Status: 429, Body: fmt.Sprintf(
			`{"error":{"type":"usage_limit_reached","message":"limit","plan_type":"plus","resets_at":%d}}`, resets)})
		h := &testHost{key: "k"}
		res := e.run(t, h, nil)
		if res.Error == nil || res.Error.Code != api.TaskErrUsageLimit {
			t.Fatalf("result %+v %+v", res, res.Error)
		}
		if res.Error.RetryAt == nil || res.Error.RetryAt.Before(time.Now().Add(time.Hour)) || res.Error.RetryAt.After(time.Now().Add(3*time.Hour)) {
			t.Errorf("retry_at %v (%q)", res.Error.RetryAt, res.Error.Message)
		}
	})
	t.Run("401", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Status: 401}, modelfake.OpenAITurn{Status: 401},
			modelfake.OpenAITurn{Status: 401}, modelfake.OpenAITurn{Status: 401}, modelfake.OpenAITurn{Status: 401},
			modelfake.OpenAITurn{Status: 401})
		h := &testHost{key: "sk-wrong"}
		res := e.run(t, h, nil)
		if res.Status != "failed" || res.Error == nil || res.Error.Code != api.TaskErrAuthFailed {
			t.Fatalf("result %+v %+v", res, res.Error)
		}
		if n := len(e.fake.Requests()); n > 2 {
			t.Errorf("codex asked %d times after a 401: not stopped at the first", n)
		}
	})
	t.Run("no key", func(t *testing.T) {
		e := newCodexEnv(t, modelfake.OpenAITurn{Text: "never"})
		h := &testHost{noKey: true}
		res := e.run(t, h, nil)
		if res.Status != "failed" || res.Error == nil || res.Error.Code != api.TaskErrAuthFailed {
			t.Fatalf("result %+v %+v", res, res.Error)
		}
	})
}

func TestShellScript(t *testing.T) {
	for in, want := range map[string]string{
		`/bin/bash -lc 'touch /tmp/x'`:          "touch /tmp/x",
		`/bin/bash -lc ls`:                      "ls",
		`/bin/bash -c 'echo '"'"'hi'"'"''`:      "echo 'hi'",
		`/usr/bin/zsh -lc "a \"b\""`:            `a "b"`,
		`/tmp/evil/bash -lc ls`:                 `/tmp/evil/bash -lc ls`,
		`bash -lc ls`:                           `bash -lc ls`,
		`/bin/bash -lc ls; rm -rf /`:            `/bin/bash -lc ls; rm -rf /`,
		`/bin/bash -lc 'ls' extra`:              `/bin/bash -lc 'ls' extra`,
		`/bin/bash -lc "$(evil)"`:               `/bin/bash -lc "$(evil)"`,
		`/bin/bash -lc 'unterminated`:           `/bin/bash -lc 'unterminated`,
		`/bin/bash -x 'ls'`:                     `/bin/bash -x 'ls'`,
		`/bin/bash -lc a\ b`:                    "a b",
		"/bin/bash -lc 'a\nb'":                  "a\nb",
		`/bin/bash -lc 'cat a > b'`:             "cat a > b",
		`/bin/bash -lc "x" > /etc/passwd`:       `/bin/bash -lc "x" > /etc/passwd`,
		`/bin/bash -lc 'x' & /bin/bash -lc 'y'`: `/bin/bash -lc 'x' & /bin/bash -lc 'y'`,
	} {
		if got := shellScript(in); got != want {
			t.Errorf("shellScript(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCodexRetryAt(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for msg, want := range map[string]time.Time{
		"You've hit your usage limit. ... or try again at 11:28 AM.": time.Date(2026, 11, 29, 11, 28, 0, 0, time.UTC),
		"try again at 9:05 AM":                time.Date(2026, 11, 30, 9, 5, 0, 0, time.UTC),
		"try again at 12:00 PM":               time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		"try again at Dec 2nd, 2026 3:04 PM.": time.Date(2026, 12, 2, 15, 4, 0, 0, time.UTC),
		"no time here":                        {},
	} {
		got, ok := retryAt(msg, now)
		if ok != !want.IsZero() || !got.Equal(want) {
			t.Errorf("retryAt(%q) = %v %v, want %v", msg, got, ok, want)
		}
	}
}

func TestCodexErrorClasses(t *testing.T) {
	for in, want := range map[string]string{
		`"usageLimitExceeded"`: api.TaskErrUsageLimit,
		`"rateLimitExceeded"`:  api.TaskErrUsageLimit,
		`"unauthorized"`:       api.TaskErrAuthFailed,
		`{"responseTooManyFailedAttempts":{"httpStatusCode":429}}`: api.TaskErrUsageLimit,
		`{"responseStreamDisconnected":{"httpStatusCode":401}}`:    api.TaskErrAuthFailed,
		`{"httpConnectionFailed":{"httpStatusCode":403}}`:          api.TaskErrAuthFailed,
		`{"httpConnectionFailed":{"httpStatusCode":500}}`:          "",
		`"other"`: "", `null`: "", `[1]`: "", `{"x":1}`: "",
	} {
		if got := classifyCodexError(json.RawMessage(in)); got != want {
			t.Errorf("classify(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestCodexEditsWithin(t *testing.T) {
	dir := t.TempDir()
	cwd, state := filepath.Join(dir, "work"), filepath.Join(dir, "work", "state")
	for _, d := range []string{cwd, state, filepath.Join(dir, "elsewhere")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(cwd, "link")); err != nil {
		t.Fatal(err)
	}
	ch := func(paths ...string) json.RawMessage {
		var cs []map[string]any
		for _, p := range paths {
			cs = append(cs, map[string]any{"path": p, "kind": map[string]any{"type": "add"}, "diff": ""})
		}
		b, _ := json.Marshal(cs)
		return b
	}
	for _, c := range []struct {
		changes json.RawMessage
		want    bool
	}{
		{ch(filepath.Join(cwd, "a.go")), true},
		{ch("sub/new/b.go"), true},
		{ch(filepath.Join(cwd, "a.go"), filepath.Join(dir, "x")), false},
		{ch(filepath.Join(state, "config.toml")), false},
		{ch(filepath.Join(cwd, ".git/hooks/pre-commit")), false},
		{ch(filepath.Join(cwd, ".codex/config.toml")), false},
		{ch(filepath.Join(cwd, "link/x")), false},
		{ch(filepath.Join(cwd, "../work2/x")), false},
		{ch(cwd), false},
		{json.RawMessage(`[{"path":"` + filepath.Join(cwd, "a") + `","kind":{"type":"update","move_path":"/etc/passwd"}}]`), false},
		{json.RawMessage(`[]`), false},
		{json.RawMessage(`nope`), false},
	} {
		if got := editsWithin(c.changes, cwd, state); got != c.want {
			t.Errorf("editsWithin(%s) = %v, want %v", c.changes, got, c.want)
		}
	}
}

// Codex's command line: the pool's extra arguments first, then the
// provider and the flags the adapter's safety rests on, then app-server;
// a base URL is quoted as TOML whatever it holds.
func TestCodexArgv(t *testing.T) {
	got := codexArgv(Options{Argv: []string{"/bin/codex", "-c", "x=1"}, Model: "m"}, `http://127.0.0.1:9/v1"]`)
	want := []string{"/bin/codex", "-c", "x=1",
		"-c", `model_provider="orchestrd"`, "-c", `model_providers.orchestrd.name="orchestrd"`,
		"-c", `model_providers.orchestrd.base_url="http://127.0.0.1:9/v1\"]"`,
		"-c", `model_providers.orchestrd.wire_api="responses"`, "-c", `model_providers.orchestrd.env_key="OPENAI_API_KEY"`,
		"-c", `model="m"`, "-c", `shell_environment_policy.exclude=["OPENAI_API_KEY"]`,
		"-c", "features.unified_exec_tty=false", "app-server"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("argv\n%q\nwant\n%q", got, want)
	}
}

// A task stopped while Codex waits for a permission ends cancelled, and
// Codex with it.
func TestCodexStopped(t *testing.T) {
	e := newCodexEnv(t, modelfake.OpenAITurn{Calls: []modelfake.OpenAICall{codexTouchCall("never.txt")}})
	asked := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	h := &testHost{key: "k", decide: func(string, json.RawMessage) Decision {
		close(asked)
		<-release
		return Decision{Approved: true}
	}}
	proc := &Proc{}
	go func() {
		<-asked
		proc.Stop(2 * time.Second)
	}()
	res := e.run(t, h, func(t *Task) { t.Proc = proc })
	if res.Status != "cancelled" {
		t.Fatalf("result %+v %+v", res, res.Error)
	}
	if _, err := os.Stat(filepath.Join(e.cwd, "never.txt")); err == nil {
		t.Error("the command ran")
	}
}
