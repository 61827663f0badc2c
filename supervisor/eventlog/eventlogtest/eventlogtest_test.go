package eventlogtest_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

type good struct {
	Lane string `json:"lane"`
	N    int    `json:"n"`
}

func (good) Kind() string { return "test.good" }

type eph struct {
	Data string `json:"data"`
}

func (eph) Kind() string { return "test.eph" }
func (eph) Ephemeral()   {}

type unregistered struct{}

func (unregistered) Kind() string { return "test.unregistered" }

type reserved struct {
	TS string `json:"ts"`
}

func (reserved) Kind() string { return "test.reserved" }

type scalar int

func (scalar) Kind() string { return "test.scalar" }

type impostor struct{}

func (impostor) Kind() string { return "test.good" }

func init() { eventlog.Register(good{}, eph{}) }

// recorder is a testing.TB that keeps what CheckKinds reports.
type recorder struct {
	testing.TB // the real test: TempDir, Cleanup
	errs       []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Failed() bool              { return len(r.errs) > 0 }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }

// check runs CheckKinds and returns what it reported.
func check(t *testing.T, samples ...eventlog.Event) []string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		eventlogtest.CheckKinds(r, samples...)
	}()
	<-done
	return r.errs
}

func TestCheckKinds(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []eventlog.Event
		want    []string // one substring per report, in order
	}{
		{"all good", []eventlog.Event{good{Lane: "a", N: 1}, eph{Data: "x"}}, nil},
		{"not registered", []eventlog.Event{good{}, eph{}, unregistered{}},
			[]string{"test.unregistered (eventlogtest_test.unregistered) is not registered: call eventlog.Register(unregistered{})"}},
		{"registered by another type", []eventlog.Event{impostor{}, eph{}},
			[]string{"test.good is registered by eventlogtest_test.good, not by eventlogtest_test.impostor"}},
		{"reserved field", []eventlog.Event{good{}, eph{}, reserved{TS: "x"}},
			[]string{"test.reserved (eventlogtest_test.reserved) is not registered", `test.reserved has a field named "ts"`}},
		{"not an object", []eventlog.Event{good{}, eph{}, scalar(1)},
			[]string{"is not registered", "test.scalar: encodes to 1, not a JSON object"}},
		{"two samples", []eventlog.Event{good{}, good{N: 2}, eph{}}, []string{"two samples of test.good"}},
		{"a kind without a sample", []eventlog.Event{good{}},
			[]string{"test.eph (eventlogtest_test.eph) has no sample"}},
		{"another package's kinds without samples", []eventlog.Event{eventlog.LogDropped{Dropped: 1}},
			[]string{"conn.protocol_error (eventlog.ConnProtocolError) has no sample", "conn.refused (eventlog.ConnRefused) has no sample"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := check(t, c.samples...)
			ok := len(got) == len(c.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.Contains(got[i], c.want[i])
			}
			if !ok {
				t.Fatalf("reported %q\nwant %q", got, c.want)
			}
		})
	}
}
