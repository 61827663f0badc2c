// Package runnerentry starts `orchestrd runner` before most of the
// orchestrd binary is initialised: a runner needs lanes/runner and what it
// imports, not the daemon's store (sqlite), actors (protoactor,
// OpenTelemetry), metrics (Prometheus) or front-ends, whose package
// initialisers were most of a runner's start.
//
// It relies on the order the Go specification gives package
// initialisation (Go 1.21 and later): packages are taken sorted by import
// path, and each step initialises the first one whose imports are all
// initialised. This package imports only lanes/runner, so it is initialised
// as soon as that is, and its path sorts before every package of the
// daemon; what sorts before it and is ready first (stdlib, and third-party
// packages that do not wait for net) is still initialised before it.
// cmd/orchestrd's TestRunnerStartsBeforeDaemonInit keeps that true.
//
// Its init runs the runner and exits when argv[1] is "runner"; for every
// other command it does nothing. cmd/orchestrd still lists the command (help,
// completion) and runs runner.Main the same way for `orchestrd help runner`.
package runnerentry

import (
	"os"

	"github.com/orchestrd/orchestrd/lanes/runner"
)

func init() {
	if len(os.Args) < 2 || os.Args[1] != "runner" {
		return
	}
	// Package initialisation runs with the main goroutine locked to the
	// main thread: a runner run on it would hand its thread over at each
	// wait. It runs on a goroutine of its own, the main one waiting.
	code := make(chan int)
	go func() { code <- runner.Main(os.Args[2:]) }()
	os.Exit(<-code)
}
