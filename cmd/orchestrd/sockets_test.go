package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const socketsConfig = `
[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.byo]
runners = 0
slots = 1
network = "host"
`

// Every socket the daemon serves (the control socket, each lane's) is
// created 0600: inotify, watching the home from before the daemon starts,
// sees each one created and never chmod-ed afterwards (IN_ATTRIB), so there
// was no moment another user could have connected.
func TestSocketsArePrivateFromTheStart(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, home, unix.IN_CREATE|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	d := startDaemonAt(t, home, socketsConfig)
	created, changed := map[string]bool{}, map[string]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(in, buf)
		if err != nil || n <= 0 {
			break // EAGAIN: every event so far is read
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			if ev.Mask&unix.IN_CREATE != 0 {
				created[name] = true
			}
			if ev.Mask&unix.IN_ATTRIB != 0 {
				changed[name] = true
			}
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				t.Fatal("inotify queue overflowed")
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	for _, name := range []string{"daemon.sock", "runner-net.sock", "runner-byo.sock"} {
		fi, err := os.Lstat(filepath.Join(d.home, name))
		if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want a socket, 0600", name, fi.Mode(), err)
		}
		if !created[name] || changed[name] {
			t.Errorf("%s: created %v, its mode changed after %v; want created 0600 and left so", name, created[name], changed[name])
		}
	}
}

// What sits where a lane's socket goes and is not a socket is not the
// daemon's to remove: serve refuses to start, naming it, and leaves it.
func TestServeLeavesWhatIsNotASocket(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(socketsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "runner-byo.sock")
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "serve", "--home", home, "--log-format", "json")
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("serve: %v, want exit status 1; stderr %s", err, stderr.String())
	}
	if want := "lane byo: " + path + " exists and is not a socket"; !strings.Contains(stderr.String(), want) {
		t.Fatalf("serve said %s\nwant it to say %q", stderr.String(), want)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "not a socket" {
		t.Fatalf("the file was touched: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(home, "daemon.sock")); !os.IsNotExist(err) {
		t.Fatalf("daemon.sock left behind: %v", err)
	}
}
