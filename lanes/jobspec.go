package lanes

import (
	"sort"
	"strings"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/wire"
)

// wireJob is the Job frame that runs spec as job id.
// kill_grace_ms goes only when it is not the runner's default: such a Job is
// the spec's ToolJob byte for byte.
func wireJob(s *api.JobSpec, id string) wire.Job {
	w := wire.Job{JobID: id, AgentID: s.AgentID, ToolName: s.ToolName, Command: s.Command, Argv: s.Argv,
		Cwd: s.Cwd, WorktreeDir: s.WorktreeDir, Env: s.Env, TimeoutMs: s.TimeoutMs,
		MaxOutputBytes: s.MaxOutputBytes, FilePaths: s.FilePaths, Stdin: s.StdinB64, StdinStream: s.StdinStream}
	if g := s.KillGraceMs; g != nil && *g != wire.DefaultKillGraceMs {
		v := *g
		w.KillGraceMs = &v
	}
	return w
}

// checkEnv refuses environment entries no process can be given, naming the
// key: an empty key, a key holding '=' (it would end at the '='), and NUL
// bytes (they would cut the entry short).
func checkEnv(env map[string]string) error {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case k == "":
			return api.Errorf(api.CodeInvalidParams, "env has an empty key")
		case strings.IndexByte(k, '=') >= 0:
			return api.Errorf(api.CodeInvalidParams, "env key %q contains '=', which cannot be part of a variable name", k)
		case strings.IndexByte(k, 0) >= 0:
			return api.Errorf(api.CodeInvalidParams, "env key %q contains a NUL byte", k)
		case strings.IndexByte(env[k], 0) >= 0:
			return api.Errorf(api.CodeInvalidParams, "env value of %q contains a NUL byte", k)
		}
	}
	return nil
}

// takeStdin moves the job's input, given as text (stdin) or bytes
// (stdin_b64), into spec.StdinB64 and checks that it fits a Job frame.
func (m *Manager) takeStdin(spec *api.JobSpec) error {
	if spec.Stdin != "" && len(spec.StdinB64) > 0 {
		return api.Errorf(api.CodeInvalidParams, "job takes stdin or stdin_b64, not both")
	}
	if spec.StdinStream && (spec.Stdin != "" || len(spec.StdinB64) > 0) {
		return api.Errorf(api.CodeInvalidParams, "job takes stdin_stream or its stdin inline (stdin, stdin_b64), not both")
	}
	if spec.Stdin != "" {
		spec.StdinB64, spec.Stdin = []byte(spec.Stdin), ""
	}
	n := len(spec.StdinB64)
	if n == 0 {
		spec.StdinB64 = nil
		return nil
	}
	if n > api.MaxStdinBytes {
		return api.Errorf(api.CodeInvalidParams,
			"stdin is %d bytes, more than the %d (%d KiB) a job can be given; pass larger input in a file", n, api.MaxStdinBytes, api.MaxStdinBytes>>10)
	}
	j := wireJob(spec, m.idPre+"18446744073709551615") // the longest id
	frame, err := wire.Marshal(wire.TypeJob, &j)
	if err != nil {
		return api.Errorf(api.CodeInvalidParams, "encoding the job: %v", err)
	}
	if size := len(frame) - wire.HeaderSize; m.sh.maxFrame > 0 && size > int(m.sh.maxFrame) {
		return api.Errorf(api.CodeInvalidParams,
			"the job with %d bytes of stdin needs a %d-byte runner frame, more than daemon.max_frame_bytes (%d); pass the input in a file",
			n, size, m.sh.maxFrame)
	}
	return nil
}
