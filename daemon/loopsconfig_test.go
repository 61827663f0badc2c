package daemon

import (
	"strings"
	"testing"
)

// [loops] chat_executor names a configured pool; unknown keys and a pool
// that is not there are refused, naming the key.
func TestLoopsChatExecutorConfig(t *testing.T) {
	cfg, err := ParseConfig("test.toml", []byte(`
[executors.chat]
command = ["agent"]
[loops]
chat_executor = "chat"
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Loops.ChatExecutor != "chat" {
		t.Fatalf("chat_executor = %q", cfg.Loops.ChatExecutor)
	}
	if DefaultConfig().Loops.ChatExecutor != "" {
		t.Fatal("the embedded config has a chat executor")
	}
	_, err = ParseConfig("test.toml", []byte(`
[loops]
chat_executor = "nope"
bogus = 1
`))
	if err == nil {
		t.Fatal("a bad [loops] table was accepted")
	}
	for _, want := range []string{"unknown key loops.bogus", `loops.chat_executor names executor pool "nope"`, "[executors.nope]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := ParseConfig("test.toml", []byte("[loops]\nchat_executor = 3\n")); err == nil || !strings.Contains(err.Error(), "loops.chat_executor") {
		t.Fatalf("a number for chat_executor: %v", err)
	}
}
