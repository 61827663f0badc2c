package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/wire"
)

func TestMainFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "usage: orchestrd runner --lane L --socket PATH"},
		{nil, 2, "--lane and --socket are required"},
		{[]string{"--lane", "x"}, 2, "--lane and --socket are required"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--lane", "x", "--socket", "/s", "extra"}, 2, "unexpected argument"},
		{[]string{"--lane", "x", "--socket", t.TempDir() + "/missing.sock", "--id", "r9"}, 1, `"message":"runner failed"`},
	} {
		var out testio.SyncBuffer
		if code := mainWith(tc.args, &out, &out, nil, false); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("Main(%q) = %d, output %q; want %d and %q", tc.args, code, out.String(), tc.code, tc.want)
		}
	}
}

func TestMainServesUntilShutdown(t *testing.T) {
	var out testio.SyncBuffer
	d := startWith(t, okAck(1), func(ctx context.Context, o Options) error {
		if code := mainWith([]string{"--lane", o.Lane, "--socket", o.Socket, "--id", "r-7"}, &out, &out, ctx.Done(), false); code != 0 {
			return fmt.Errorf("exit code %d", code)
		}
		return nil
	})
	if d.hs.Lane != "no-net" || d.hs.Version == "" {
		t.Fatalf("handshake %+v", d.hs)
	}
	if r := d.run(wire.Job{JobID: "m1", Command: "echo hi"}).res; r.Status != wire.StatusSuccess || r.Output != "hi\n" {
		t.Fatalf("result %+v", r)
	}
	d.send(wire.TypeShutdown, wire.Shutdown{})
	if err := d.waitRun(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, `"runner_id":"r-7"`) || !strings.Contains(s, "runner stopped") {
		t.Fatalf("log %s", s)
	}
}
