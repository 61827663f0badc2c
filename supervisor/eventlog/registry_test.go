package eventlog

import (
	"slices"
	"strings"
	"testing"
)

type regA struct{}

func (regA) Kind() string { return "reg.a" }

type regB struct{ N int }

func (regB) Kind() string { return "reg.b" }

type regClash struct{}

func (regClash) Kind() string { return "reg.a" }

type regEmpty struct{}

func (regEmpty) Kind() string { return "" }

func TestRegistry(t *testing.T) {
	var r kindRegistry
	if r.known("*") || r.get("reg.a") != nil || len(r.list()) != 0 {
		t.Fatal("an empty registry knows something")
	}
	r.register(regB{N: 1}, regA{})
	r.register(regA{}) // again: a no-op
	if got := r.list(); !slices.Equal(got, []string{"reg.a", "reg.b"}) {
		t.Fatalf("list() = %v", got)
	}
	if _, ok := r.get("reg.b").(regB); !ok {
		t.Fatalf("get(reg.b) = %#v", r.get("reg.b"))
	}
	for pattern, want := range map[string]bool{
		"reg.a": true, "reg.*": true, "*": true,
		"reg.c": false, "reg": false, "re.*": false, "other.*": false,
	} {
		if got := r.known(pattern); got != want {
			t.Errorf("known(%q) = %v, want %v", pattern, got, want)
		}
	}
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{regClash{}, `kind "reg.a" registered by github.com/orchestrd/orchestrd/supervisor/eventlog.regA and github.com/orchestrd/orchestrd/supervisor/eventlog.regClash`},
		{regEmpty{}, "regEmpty has an empty kind"},
	} {
		func() {
			defer func() {
				p, _ := recover().(string)
				if !strings.Contains(p, c.want) {
					t.Errorf("register(%T) panicked with %q, want %q", c.ev, p, c.want)
				}
			}()
			r.register(c.ev)
		}()
	}
	if got := r.list(); !slices.Equal(got, []string{"reg.a", "reg.b"}) {
		t.Fatalf("after refused registrations list() = %v", got)
	}
}

// The package-level functions read the registry eventlog registers its own
// kinds in (the domains' kinds are not linked into this test).
func TestRegisteredKinds(t *testing.T) {
	if got := Kinds(); !slices.Equal(got, []string{"conn.protocol_error", "conn.refused", "eventlog.dropped"}) {
		t.Fatalf("Kinds() = %v", got)
	}
	if _, ok := Registered("conn.refused").(ConnRefused); !ok || Registered("lane.started") != nil {
		t.Fatal("Registered disagrees with the registry")
	}
	if !Known("eventlog.dropped") || !Known("conn.*") || Known("nope.*") {
		t.Fatal("Known disagrees with the registry")
	}
}
