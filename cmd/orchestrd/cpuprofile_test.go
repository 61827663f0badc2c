package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// serve --cpuprofile FILE: the daemon writes a CPU profile of its run,
// one `go tool pprof` reads, when it stops; an existing FILE is refused
// (exit 2) rather than overwritten.
func TestServeCPUProfile(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(fastConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(shortTemp(t), "daemon.pprof")
	d := startDaemonCmd(t, home, binary, "serve", "--home", home, "--cpuprofile", prof)
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"true"}})
	if rec := d.wait(id); rec.State != api.StateSucceeded {
		t.Fatalf("job %+v", rec)
	}
	d.stop()
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	// A pprof profile is a gzipped protobuf.
	if len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile: %d bytes, starts %x", len(b), b[:min(len(b), 4)])
	}
	out, errOut, code := runCLI(t, "serve", "--home", shortTemp(t), "--cpuprofile", prof)
	if code != 2 || !strings.Contains(errOut, "--cpuprofile") || !strings.Contains(errOut, "exists") {
		t.Fatalf("existing profile: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
