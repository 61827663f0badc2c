package daemon

import (
	"fmt"

	"github.com/orchestrd/orchestrd/executors"
)

// LoopsConfig is the [loops] table as far as the chat needs it: the pool
// Loopr's chat runs on. The loops domain's own keys (executor,
// validation_lane, max_running...) join it with that domain.
type LoopsConfig struct {
	// ChatExecutor names the [executors.NAME] pool chat.send runs on;
	// "" leaves the chat off (chat.send says which key to set).
	ChatExecutor string `toml:"chat_executor"`
}

// validate checks that chat_executor names a configured pool.
func (c LoopsConfig) validate(key string, pools map[string]executors.PoolConfig) []error {
	if c.ChatExecutor == "" {
		return nil
	}
	if _, ok := pools[c.ChatExecutor]; !ok {
		return []error{fmt.Errorf("%s.chat_executor names executor pool %q, which is not configured (no [executors.%s] table)",
			key, c.ChatExecutor, c.ChatExecutor)}
	}
	return nil
}
