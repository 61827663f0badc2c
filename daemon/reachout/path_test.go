package reachout

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	const secret = "123456:SECRET-TOKEN"
	files := map[string]string{
		"/xdg/vibe-reachout/config.toml":            "telegram_bot_token = \"" + secret + "\"\nallowed_chat_ids = [1]\nsocket_path = \"/custom/bot.sock\"\ntimeout_seconds = 120\n",
		"/home/u/.config/vibe-reachout/config.toml": "telegram_bot_token = \"" + secret + "\"\nallowed_chat_ids = [1]\n",
		"/bad/vibe-reachout/config.toml":            "telegram_bot_token = \"" + secret + "\"\nallowed_chat_ids = [1\n",
		"/badtype/vibe-reachout/config.toml":        "telegram_bot_token = \"" + secret + "\"\nsocket_path = 7\n",
		"/badtimeout/vibe-reachout/config.toml":     "telegram_bot_token = \"" + secret + "\"\ntimeout_seconds = 0\nsocket_path = \"/x.sock\"\n",
		"/tstring/vibe-reachout/config.toml":        "telegram_bot_token = \"" + secret + "\"\ntimeout_seconds = \"" + secret + "\"\n",
	}
	read := func(p string) ([]byte, error) {
		if p == "/denied/vibe-reachout/config.toml" {
			return nil, &fs.PathError{Op: "open", Path: p, Err: syscall.EACCES}
		}
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	for _, c := range []struct {
		name       string
		configured string
		env        map[string]string
		want       Resolved
	}{
		{"configured wins", "/mine.sock", map[string]string{"XDG_CONFIG_HOME": "/xdg", "XDG_RUNTIME_DIR": "/run/user/7"},
			Resolved{Path: "/mine.sock", HookConfig: "/xdg/vibe-reachout/config.toml", HookTimeout: 120 * time.Second}},
		{"hook's socket_path", "", map[string]string{"XDG_CONFIG_HOME": "/xdg", "XDG_RUNTIME_DIR": "/run/user/7"},
			Resolved{Path: "/custom/bot.sock", HookConfig: "/xdg/vibe-reachout/config.toml", HookTimeout: 120 * time.Second}},
		{"~/.config without socket_path: runtime dir", "", map[string]string{"HOME": "/home/u", "XDG_RUNTIME_DIR": "/run/user/7"},
			Resolved{Path: "/run/user/7/vibe-reachout.sock", HookConfig: "/home/u/.config/vibe-reachout/config.toml", HookTimeout: DefaultHookTimeout}},
		{"relative XDG_CONFIG_HOME is ignored", "", map[string]string{"XDG_CONFIG_HOME": "xdg", "HOME": "/home/u"},
			Resolved{Path: "/tmp/vibe-reachout-7.sock", HookConfig: "/home/u/.config/vibe-reachout/config.toml", HookTimeout: DefaultHookTimeout}},
		{"no config file, no runtime dir", "", map[string]string{"HOME": "/nowhere"},
			Resolved{Path: "/tmp/vibe-reachout-7.sock", HookTimeout: DefaultHookTimeout}},
		{"no HOME at all", "", map[string]string{},
			Resolved{Path: "/tmp/vibe-reachout-7.sock", HookTimeout: DefaultHookTimeout}},
		{"unreadable", "", map[string]string{"XDG_CONFIG_HOME": "/denied", "XDG_RUNTIME_DIR": "/r"},
			Resolved{Path: "/r/vibe-reachout.sock", HookTimeout: DefaultHookTimeout,
				Warning: "cannot read vibe-reachout's config /denied/vibe-reachout/config.toml: permission denied"}},
		{"bad TOML", "", map[string]string{"XDG_CONFIG_HOME": "/bad", "XDG_RUNTIME_DIR": "/r"},
			Resolved{Path: "/r/vibe-reachout.sock", HookTimeout: DefaultHookTimeout,
				Warning: "ignoring vibe-reachout's config /bad/vibe-reachout/config.toml: not valid TOML (line 2)"}},
		{"socket_path not a string", "", map[string]string{"XDG_CONFIG_HOME": "/badtype", "XDG_RUNTIME_DIR": "/r"},
			Resolved{Path: "/r/vibe-reachout.sock", HookTimeout: DefaultHookTimeout,
				Warning: "ignoring vibe-reachout's config /badtype/vibe-reachout/config.toml: socket_path is not a string"}},
		{"timeout_seconds out of range", "", map[string]string{"XDG_CONFIG_HOME": "/badtimeout", "XDG_RUNTIME_DIR": "/r"},
			Resolved{Path: "/r/vibe-reachout.sock", HookTimeout: DefaultHookTimeout,
				Warning: "ignoring vibe-reachout's config /badtimeout/vibe-reachout/config.toml: timeout_seconds is not between 1 and 3600"}},
		{"timeout_seconds a string", "", map[string]string{"XDG_CONFIG_HOME": "/tstring", "XDG_RUNTIME_DIR": "/r"},
			Resolved{Path: "/r/vibe-reachout.sock", HookTimeout: DefaultHookTimeout,
				Warning: "ignoring vibe-reachout's config /tstring/vibe-reachout/config.toml: timeout_seconds is not an integer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Resolve(c.configured, Env{Getenv: func(k string) string { return c.env[k] }, ReadFile: read, UID: 7})
			if got != c.want {
				t.Fatalf("Resolve = %+v\nwant %+v", got, c.want)
			}
			if strings.Contains(got.Warning, "SECRET") {
				t.Fatalf("the warning quotes the hook's config: %s", got.Warning)
			}
		})
	}
}
