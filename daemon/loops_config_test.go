package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func TestLoopsConfig(t *testing.T) {
	cfg, err := ParseConfig("test.toml", []byte(`
[executors.claude]
command = ["orchestrd", "executor", "--", "claude", "-p"]
[loops]
executor = "claude"
chat_executor = "claude"
max_running = 2
auto_merge = true
usage_limit_pause = "10m"
max_rebase_iterations = 5
[loops.code]
validation_command = "go test ./..."
validation_timeout = "20m"
validation_lane = "net"
max_iterations = 7
[loops.plan]
max_iterations = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Loops
	if l.Executor != "claude" || l.ChatExecutor != "claude" || l.MaxRunning != 2 || !l.AutoMerge ||
		l.UsageLimitPause.Duration != 10*time.Minute || l.MaxRebaseIterations != 5 || l.ValidationLane != "no-net" || l.PermissionMode != api.ModeBypass ||
		l.MergeRetry.Duration != 30*time.Second {
		t.Fatalf("[loops]: %+v", l)
	}
	code, plan, spec := l.For(api.LoopCode), l.For(api.LoopPlan), l.For(api.LoopSpec)
	if code.ValidationCommand != "go test ./..." || code.ValidationTimeout.Duration != 20*time.Minute ||
		code.ValidationLane != "net" || code.MaxIterations != 7 || code.Executor != "claude" {
		t.Fatalf("[loops.code]: %+v", code)
	}
	if plan.MaxIterations != 3 || plan.ValidationLane != "no-net" || spec.MaxIterations != 10 ||
		spec.ValidationTimeout.Duration != 300*time.Second || l.For(api.LoopPhase).MaxIterations != 10 {
		t.Fatalf("defaults: plan %+v spec %+v", plan, spec)
	}
	// A daemon without [loops] is not refused for lanes it lacks; a
	// child's conflict rebases 3 times by default.
	if c, err := ParseConfig("test.toml", []byte("[lanes.x]\nrunners = 1\n")); err != nil || c.Loops.MaxRebaseIterations != 3 {
		t.Fatalf("a config without [loops]: %v", err)
	}
	_, err = ParseConfig("test.toml", []byte(`
[lanes.x]
runners = 1
[loops]
bogus = 1
max_running = 0
executor = "nope"
validation_lane = "no-net"
usage_limit_pause = "1ms"
merge_retry = "2h"
max_rebase_iterations = 101
permission_mode = "yolo"
prompts = { code = "relative.md", weird = "/x" }
[loops.code]
max_iterations = -1
validation_timeout = "0s"
extra = true
[loops.spec]
max_iterations = 0
`))
	if err == nil {
		t.Fatal("a bad [loops] was accepted")
	}
	for _, want := range []string{"unknown key loops.bogus", "loops.max_running must be between 1 and 1024",
		`loops.executor: no executor pool "nope"`, `loops.validation_lane: no lane "no-net"`,
		"loops.usage_limit_pause must be", "loops.merge_retry must be between 1s and 1h", "loops.max_rebase_iterations must be between 0", "loops.permission_mode must be", "loops.prompts.code must be an absolute path", `"weird" is not a loop type`,
		"loops.code.max_iterations must be >= 0", "loops.code.validation_timeout must be", "unknown key loops.code.extra",
		"loops.spec.max_iterations must be between 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
