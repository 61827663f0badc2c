package lanes

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Secrets is what the lanes take of the daemon's secrets.toml
// (platform/secrets.File): the value a name resolves to, by the file's
// key or a name it answers to ("anthropic" and "ANTHROPIC_API_KEY").
type Secrets interface {
	Find(name string) (entry, value string, expiresAt time.Time, ok bool)
}

// A job's secrets (api.JobSpec.Secrets) are only names until it is
// dispatched: its record, its spec in the state store, its events and
// its queue entry hold the variable and the secret's name; the lane looks
// the values up as it hands the job to a runner (withSecrets) and puts
// them in the Job frame's env, which lives in memory until it is written
// to the runner. A job that bounces back to the queue keeps that frame;
// one queued again after a crash has its names from the store and is
// looked up again. An error never holds a value.

// checkSecrets refuses secrets a job cannot be given, naming the variable
// and the secret: a variable no process can have (as checkEnv), one env
// sets too, a secret the daemon does not have or whose value no process
// can be given (a NUL byte).
func checkSecrets(spec *api.JobSpec, s Secrets) error {
	for _, k := range slices.Sorted(maps.Keys(spec.Secrets)) {
		name := spec.Secrets[k]
		switch {
		case k == "":
			return api.Errorf(api.CodeInvalidParams, "secrets has an empty variable name")
		case strings.ContainsAny(k, "=\x00"):
			return api.Errorf(api.CodeInvalidParams, "secrets variable %q contains '=' or a NUL byte, which cannot be part of a variable name", k)
		case name == "":
			return api.Errorf(api.CodeInvalidParams, "secrets variable %q names no secret", k)
		}
		if _, both := spec.Env[k]; both {
			return api.Errorf(api.CodeInvalidParams, "%s is given both by env and by secrets", k)
		}
		v, ok := lookupSecret(s, name)
		if !ok {
			return api.Errorf(api.CodeInvalidParams, "no secret %q in the daemon's secrets.toml (for %s)", name, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return api.Errorf(api.CodeInvalidParams, "secret %q holds a NUL byte, which no process can be given", name)
		}
	}
	return nil
}

func lookupSecret(s Secrets, name string) (string, bool) {
	if s == nil {
		return "", false
	}
	_, v, _, ok := s.Find(name)
	return v, ok
}

// withSecrets is env with the secrets looked up: a new map (the frame's
// env may be shared with the spec's). missing is the first secret the
// daemon no longer has (its variable), "" when all were found.
func withSecrets(env, secrets map[string]string, s Secrets) (out map[string]string, missing string) {
	out = make(map[string]string, len(env)+len(secrets))
	maps.Copy(out, env)
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		v, ok := lookupSecret(s, secrets[k])
		if !ok || strings.IndexByte(v, 0) >= 0 {
			return nil, k
		}
		out[k] = v
	}
	return out, ""
}
