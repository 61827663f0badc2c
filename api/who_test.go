package api

import "testing"

// Who names a Telegram answer by its chat and, in a group, its user:
// ids only, as the bot records them ("<chat>:<user>").
func TestResolutionWho(t *testing.T) {
	for _, c := range []struct {
		r    Resolution
		want string
	}{
		{Resolution{By: ByTelegram, BySession: "222:222"}, "telegram chat 222"},
		{Resolution{By: ByTelegram, BySession: "-100777:333"}, "telegram chat -100777 user 333"},
		{Resolution{By: ByTelegram, BySession: "222"}, "telegram chat 222"},
		{Resolution{By: ByUI, BySession: "Xy3_abcd"}, "ui session Xy3_abcd"},
		{Resolution{By: ByCLI, ByPid: 42}, "cli pid 42"},
		{Resolution{By: ByTimeout}, "timeout"},
	} {
		if got := c.r.Who(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}
