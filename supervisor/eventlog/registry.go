package eventlog

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
)

// The registry of kinds. Each package that emits events defines its kinds
// beside the code that emits them and registers them from an init function
// (eventlog's own shared kinds are registered in kinds.go), so every binary
// that links a package knows its kinds without a list kept by hand: the
// events CLI sizes its kind column from them and warns about a --kind that
// matches none. The bus itself logs any Event, registered or not.
var registry kindRegistry

// kindRegistry maps each kind to a zero value of the type that registered
// it. Tests make their own.
type kindRegistry struct {
	mu    sync.Mutex
	kinds map[string]Event
}

// Register records the kinds of evs, one zero value of each event type:
//
//	func init() { eventlog.Register(LaneStarted{}, LaneDegraded{}) }
//
// Registering a type again is a no-op. Two different types with the same
// kind are a programming error: Register panics, naming both.
func Register(evs ...Event) { registry.register(evs...) }

// Kinds returns every registered kind, sorted.
func Kinds() []string { return registry.list() }

// Registered returns the value registered for kind, or nil when no type
// registered it.
func Registered(kind string) Event { return registry.get(kind) }

// Known reports whether pattern, as Subscribe and Query take it (an exact
// kind, "*" or "prefix.*"), matches a registered kind.
func Known(pattern string) bool { return registry.known(pattern) }

func (r *kindRegistry) register(evs ...Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinds == nil {
		r.kinds = make(map[string]Event)
	}
	for _, ev := range evs {
		kind := ev.Kind()
		if kind == "" {
			panic(fmt.Sprintf("eventlog.Register: %s has an empty kind", typeName(ev)))
		}
		if old, ok := r.kinds[kind]; ok {
			if reflect.TypeOf(old) != reflect.TypeOf(ev) {
				panic(fmt.Sprintf("eventlog.Register: kind %q registered by %s and %s", kind, typeName(old), typeName(ev)))
			}
			continue
		}
		r.kinds[kind] = ev
	}
}

func (r *kindRegistry) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

func (r *kindRegistry) get(kind string) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kinds[kind]
}

func (r *kindRegistry) known(pattern string) bool {
	m := newKindMatcher([]string{pattern})
	return slices.ContainsFunc(r.list(), m.match)
}

// typeName is ev's type as package path and name, for messages.
func typeName(ev Event) string {
	t := reflect.TypeOf(ev)
	if t.PkgPath() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}
