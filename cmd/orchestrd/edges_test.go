package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lane token of a lane there is not says the lane is unknown and which
// there are: the running daemon's, else those of the config it would read.
func TestLaneTokenOfAnUnknownLane(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig+"[lanes.byo]\nrunners = 0\n")
	_, errOut, code := runCLI(t, "lane", "token", "--home", d.home, "NOPE")
	if code != exitFailure || errOut != "orchestrd lane token: unknown lane \"NOPE\"; the daemon's lanes are byo, net, no-net\n" {
		t.Fatalf("lane token NOPE: exit %d, stderr %q", code, errOut)
	}
	if out, errOut, code := runCLI(t, "lane", "token", "--home", d.home, "byo"); code != 0 || len(strings.TrimSpace(out)) != 64 {
		t.Fatalf("lane token byo: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "lane", "token", "--home", d.home, "net"); code != exitFailure || !strings.Contains(errOut, "external_runners") {
		t.Fatalf("lane token net: exit %d, stderr %q", code, errOut)
	}

	// No daemon: the config's lanes, or the default ones.
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("[lanes.solo]\nrunners = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runCLI(t, "lane", "token", "--home", home, "NOPE")
	if code != exitFailure || errOut != "orchestrd lane token: unknown lane \"NOPE\"; the lanes of "+filepath.Join(home, "config.toml")+" are solo\n" {
		t.Fatalf("lane token NOPE, no daemon: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "lane", "token", "--home", shortTemp(t), "NOPE")
	if code != exitFailure || errOut != "orchestrd lane token: unknown lane \"NOPE\"; the default lanes are heavy, net, no-net\n" {
		t.Fatalf("lane token NOPE, no daemon, no config: exit %d, stderr %q", code, errOut)
	}
}

// approvals --source takes only the sources there are: anything else is
// refused before the daemon is asked, naming them.
func TestApprovalsSourceIsChecked(t *testing.T) {
	t.Parallel()
	_, errOut, code := runCLI(t, "approvals", "--home", shortTemp(t), "--source", "bogus")
	want := "orchestrd approvals: unknown source \"bogus\"; the sources are reachout, plan, control, executor (orchestrd approvals --help)\n"
	if code != exitUsage || errOut != want {
		t.Fatalf("approvals --source bogus: exit %d, stderr %q", code, errOut)
	}
}

// http key reads the key and never writes one: on a home where no daemon
// has made it, it says where the daemon will, and leaves the home as it
// was.
func TestHTTPKeyNeverWrites(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	_, errOut, code := runCLI(t, "http", "key", "--home", home)
	path := filepath.Join(home, "http.key")
	if code != exitFailure || !strings.Contains(errOut, "no HTTP API key at "+path) || !strings.Contains(errOut, "orchestrd serve") {
		t.Fatalf("http key on a new home: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("http key wrote %s: %v", path, err)
	}
	missing := filepath.Join(home, "missing")
	if _, _, code := runCLI(t, "http", "key", "--home", missing); code != exitFailure {
		t.Fatalf("http key on a missing home: exit %d", code)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("http key made %s: %v", missing, err)
	}
	key := strings.Repeat("ab", 32)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, "http", "key", "--home", home); code != 0 || out != key+"\n" {
		t.Fatalf("http key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
