package proc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// BaseEnvKeys are the variables of the daemon's environment that every
// process it starts for someone else (a runner and so its jobs, an
// executor) keeps: enough to find programs and speak the user's locale,
// nothing that could be a secret. LC_* is every locale variable.
var BaseEnvKeys = []string{"PATH", "HOME", "LANG", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL"}

// CleanEnv is the one mechanism by which a process the daemon starts for
// a job or an agent gets its environment: of env (the daemon's, KEY=VALUE
// entries), only the variables BaseEnvKeys and inherit name, in env's
// order. A name in either list is a variable's name or a prefix ending in
// "*" ("LC_*", "MYAPP_*"). The daemon's own secrets (an API key it reads
// for secrets.toml, say) therefore stay its own unless the configuration
// names them.
func CleanEnv(env []string, inherit []string) []string {
	out := make([]string, 0, len(BaseEnvKeys)+len(inherit))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if EnvNameMatches(BaseEnvKeys, k) || EnvNameMatches(inherit, k) {
			out = append(out, kv)
		}
	}
	return out
}

// EnvNameMatches reports whether key is one of names (a name, or a prefix
// ending in "*").
func EnvNameMatches(names []string, key string) bool {
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			if strings.HasPrefix(key, p) {
				return true
			}
		} else if n == key {
			return true
		}
	}
	return false
}

// CheckEnvConfig checks a config table's env and inherit_env keys: one
// error per bad entry, each starting with its key ("env: ...",
// "inherit_env: ...").
func CheckEnvConfig(env map[string]string, inherit []string) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := CheckEnvEntry(k, env[k]); err != nil {
			errs = append(errs, fmt.Errorf("env: %w", err))
		}
	}
	for _, n := range inherit {
		if err := CheckEnvName(n); err != nil {
			errs = append(errs, fmt.Errorf("inherit_env: %w", err))
		}
	}
	return errs
}

// CheckEnvName says what is wrong with a name for CleanEnv's inherit list
// (nil: nothing): not empty, no '=' or NUL, '*' only at the end.
func CheckEnvName(n string) error {
	switch {
	case n == "" || n == "*":
		return fmt.Errorf("%q: a variable's name or a prefix ending in '*' is needed", n)
	case strings.ContainsAny(n, "=\x00"):
		return fmt.Errorf("%q contains '=' or NUL", n)
	case strings.Contains(strings.TrimSuffix(n, "*"), "*"):
		return fmt.Errorf("%q: '*' may only end a name", n)
	}
	return nil
}

// CheckEnvEntry says what is wrong with an entry of an env table (nil:
// nothing): a key no process can have (empty, with '=' or NUL) or a value
// with NUL.
func CheckEnvEntry(k, v string) error {
	switch {
	case k == "":
		return fmt.Errorf("an empty variable name")
	case strings.ContainsAny(k, "=\x00"):
		return fmt.Errorf("variable %q contains '=' or NUL", k)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("the value of %q contains NUL", k)
	}
	return nil
}
