package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
)

// probeSandbox makes the sandbox executors, loops' agents and git run in
// once, at start, as the daemon's user (sandbox-exec in mount and pid
// namespaces of its own, a user namespace too without root, running
// /bin/true), and says in one line what it is or why it cannot be made:
// as an ordinary user it needs unprivileged user namespaces, which some
// kernels refuse. Its front-end line in status says the same.
func probeSandbox(on bool, home, exe string, log zerolog.Logger) api.FrontEnd {
	fe := api.FrontEnd{Name: "sandbox"}
	if !on {
		fe.Off = "[daemon] sandbox = false: jobs and agents reach what the daemon's user can"
		return fe
	}
	how := "root: namespaces of its own"
	if os.Geteuid() != 0 {
		how = "user namespaces (an ordinary user)"
	}
	err := trySandbox(home, exe)
	if err == nil {
		fe.Address = how
		return fe
	}
	fe.Off, fe.Failed = err.Error(), true
	log.Error().Str("reason", err.Error()).Msg("the sandbox cannot be made: executors, loops' agents, chat and terminals will not start " +
		"(allow unprivileged user namespaces: sysctl user.max_user_namespaces=N, or kernel.unprivileged_userns_clone=1; " +
		"or set [daemon] sandbox = false, which lets jobs and agents reach the daemon's sockets)")
	return fe
}

func trySandbox(home, exe string) error {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the orchestrd binary: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "sandbox-exec", "--hide", home, "--", "/bin/true")
	cmd.SysProcAttr = proc.SandboxAttr(proc.Isolation{Sandbox: true})
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if s := strings.TrimSpace(stderr.String()); s != "" {
			return fmt.Errorf("%s", firstLineOf(s))
		}
		return proc.ExplainSpawnError(err)
	}
	return nil
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
