// Command hook is a stand-in for vibe-reachout's hook mode (Claude Code's
// PermissionRequest hook), built on internal/reachouthook: it reads Claude
// Code's hook JSON on stdin, asks the socket (-socket, else
// $VIBE_REACHOUT_SOCKET) and prints Claude Code's hook output; exit 1 with
// nothing on stdout on a Timeout or any failure (Claude Code then asks in
// the terminal), as the real hook does. -timeout is the hook's
// timeout_seconds (it waits that plus 30 s).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/orchestrd/orchestrd/internal/reachouthook"
)

func main() {
	socket := flag.String("socket", os.Getenv("VIBE_REACHOUT_SOCKET"), "the hook socket's path")
	timeout := flag.Int("timeout", 300, "the hook's timeout_seconds")
	flag.Parse()
	os.Exit(run(*socket, time.Duration(*timeout)*time.Second))
}

func run(socket string, timeout time.Duration) int {
	if socket == "" {
		fmt.Fprintln(os.Stderr, "hook: no socket (-socket or $VIBE_REACHOUT_SOCKET)")
		return 2
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hook: reading stdin:", err)
		return 1
	}
	var in reachouthook.HookInput
	if err := json.Unmarshal(b, &in); err != nil {
		fmt.Fprintln(os.Stderr, "hook: hook input:", err)
		return 1
	}
	req := reachouthook.RequestFrom(in)
	// Says which request this process sent, for tests that look for it.
	fmt.Fprintln(os.Stderr, "hook: request_id", req.RequestID)
	resp, err := reachouthook.Send(socket, req, timeout+30*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hook:", err)
		return 1
	}
	out, code := reachouthook.Output(resp)
	if code != 0 {
		fmt.Fprintln(os.Stderr, "hook: request timed out, falling back to terminal")
		return code
	}
	os.Stdout.Write(out)
	return 0
}
