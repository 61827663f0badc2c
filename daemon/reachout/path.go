package reachout

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"github.com/BurntSushi/toml"
)

// DefaultHookTimeout is the hook's own default timeout_seconds.
const DefaultHookTimeout = 300 * time.Second

// Env is what the socket's path depends on, passed in so that it can be
// tested: the environment and the files the hook itself reads.
type Env struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	UID      int
}

// Resolved is where the socket goes and how long the hook waits.
type Resolved struct {
	Path string
	// HookConfig is the hook's config file that was read; "" if none was.
	HookConfig string
	// HookTimeout is the hook's timeout_seconds (DefaultHookTimeout when
	// its config does not set it): the hook gives up after it plus 30 s,
	// so an approval asked through the socket must end before it.
	HookTimeout time.Duration
	// Warning says why the hook's config file was not used, when it exists
	// but cannot be read; "" otherwise. It never quotes the file.
	Warning string
}

// hookConfig is the part of vibe-reachout's config.toml that matters here:
// only these two keys are ever read (the file holds a bot token).
type hookConfig struct {
	SocketPath     *string `toml:"socket_path"`
	TimeoutSeconds *int64  `toml:"timeout_seconds"`
}

// Resolve finds the socket's path as the hook does: configured (the
// [approvals.reachout] socket key) if set; else socket_path from
// $XDG_CONFIG_HOME/vibe-reachout/config.toml (~/.config/... when
// XDG_CONFIG_HOME is unset), when set; else
// $XDG_RUNTIME_DIR/vibe-reachout.sock; else /tmp/vibe-reachout-{uid}.sock.
// The hook's timeout_seconds is read from the same file. A file that is
// missing is no problem; one that cannot be read or parsed, or holds a
// timeout_seconds outside the hook's own 1..3600, is ignored with a
// Warning naming the file and, at most, the key and line.
func Resolve(configured string, env Env) Resolved {
	r := Resolved{HookTimeout: DefaultHookTimeout}
	var hc hookConfig
	if file := hookConfigFile(env); file != "" {
		b, err := env.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			r.Warning = fmt.Sprintf("cannot read vibe-reachout's config %s: %v", file, err)
		default:
			if err := decodeHookConfig(b, &hc); err != nil {
				r.Warning = fmt.Sprintf("ignoring vibe-reachout's config %s: %v", file, err)
				hc = hookConfig{}
			} else {
				r.HookConfig = file
			}
		}
	}
	if hc.TimeoutSeconds != nil {
		r.HookTimeout = time.Duration(*hc.TimeoutSeconds) * time.Second
	}
	switch {
	case configured != "":
		r.Path = configured
	case hc.SocketPath != nil && *hc.SocketPath != "":
		r.Path = *hc.SocketPath
	case env.Getenv("XDG_RUNTIME_DIR") != "":
		r.Path = filepath.Join(env.Getenv("XDG_RUNTIME_DIR"), "vibe-reachout.sock")
	default:
		r.Path = "/tmp/vibe-reachout-" + strconv.Itoa(env.UID) + ".sock"
	}
	return r
}

// hookConfigFile is where the hook reads its config: the dirs crate's
// config_dir (an absolute $XDG_CONFIG_HOME, else $HOME/.config); "" when
// there is none.
func hookConfigFile(env Env) string {
	dir := env.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) {
		home := env.Getenv("HOME")
		if !filepath.IsAbs(home) {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "vibe-reachout", "config.toml")
}

// decodeHookConfig reads socket_path and timeout_seconds from b. Its
// errors name a line or a key, never a value: the file holds a secret.
func decodeHookConfig(b []byte, hc *hookConfig) error {
	md, err := toml.Decode(string(b), hc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("not valid TOML (line %d)", pe.Position.Line)
		}
		switch {
		case md.IsDefined("socket_path") && !isString(md, "socket_path"):
			return errors.New("socket_path is not a string")
		case md.IsDefined("timeout_seconds"):
			return errors.New("timeout_seconds is not an integer")
		}
		return errors.New("socket_path or timeout_seconds has the wrong type")
	}
	if hc.TimeoutSeconds != nil && (*hc.TimeoutSeconds < 1 || *hc.TimeoutSeconds > 3600) {
		return errors.New("timeout_seconds is not between 1 and 3600")
	}
	return nil
}

func isString(md toml.MetaData, key string) bool { return md.Type(key) == "String" }
