// Package secrets reads <home>/secrets.toml: the API keys and tokens the
// daemon hands, just in time, to the processes it runs. Each top-level key
// is a name; its value is the secret, or a table that names an environment
// variable of the daemon's (`anthropic = { env = "ANTHROPIC_API_KEY" }`)
// or holds `value`, either with an optional `expires_at`. No value ever
// appears in an error this package returns.
package secrets

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// File is a loaded secrets file. Safe for concurrent use (read-only).
type File struct {
	entries map[string]entry
}

type entry struct {
	value   string
	env     string
	expires time.Time
}

// Load reads the secrets file at path. A missing file is an empty File. A
// file others can read (group or world bits) is refused, as is a bad one;
// the error names the file and the key, never a value.
func Load(path string) (*File, error) {
	f := &File{entries: map[string]entry{}}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets file %s is readable by others (mode %04o): chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	if err := f.parse(b); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	return f, nil
}

// parse decodes the file; its errors say where, never what.
func (f *File) parse(b []byte) error {
	var top map[string]any
	if _, err := toml.Decode(string(b), &top); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("not valid TOML at line %d, column %d", pe.Position.Line, pe.Position.Col)
		}
		return errors.New("not valid TOML")
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(top)) {
		switch v := top[name].(type) {
		case string:
			f.entries[name] = entry{value: v}
		case map[string]any:
			var e entry
			ok := true
			for _, k := range slices.Sorted(maps.Keys(v)) {
				switch k {
				case "value", "env":
					s, isStr := v[k].(string)
					if !isStr {
						errs = append(errs, fmt.Errorf("%s.%s must be a string", name, k))
						ok = false
						continue
					}
					if k == "value" {
						e.value = s
					} else {
						e.env = s
					}
				case "expires_at":
					switch t := v[k].(type) {
					case time.Time:
						e.expires = t
					case string:
						pt, err := time.Parse(time.RFC3339, t)
						if err != nil {
							errs = append(errs, fmt.Errorf("%s.expires_at must be an RFC 3339 time like 2026-12-31T00:00:00Z", name))
							ok = false
							continue
						}
						e.expires = pt
					default:
						errs = append(errs, fmt.Errorf("%s.expires_at must be a date-time", name))
						ok = false
					}
				default:
					errs = append(errs, fmt.Errorf("unknown key %s.%s (want value or env, and expires_at)", name, k))
					ok = false
				}
			}
			if (e.value == "") == (e.env == "") && ok {
				errs = append(errs, fmt.Errorf("%s needs exactly one of value or env", name))
				ok = false
			}
			if ok {
				f.entries[name] = e
			}
		default:
			errs = append(errs, fmt.Errorf("%s must be a string or a table { env = \"VAR\" } or { value = \"...\" }", name))
		}
	}
	return errors.Join(errs...)
}

// aliases are the names an executor may ask for a secret under.
var aliases = map[string][]string{
	"anthropic": {"ANTHROPIC_API_KEY"},
	"openai":    {"OPENAI_API_KEY"},
	"google":    {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
	"gemini":    {"GEMINI_API_KEY"},
	"github":    {"GITHUB_TOKEN"},
}

// candidates are the names tried for name, in order: itself, its aliases
// both ways, SERVICE <-> SERVICE_API_KEY.
func candidates(name string) []string {
	out := []string{name}
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, a := range aliases[strings.ToLower(name)] {
		add(a)
	}
	for svc, as := range aliases {
		if slices.Contains(as, name) {
			add(svc)
		}
	}
	if base, ok := strings.CutSuffix(name, "_API_KEY"); ok {
		add(strings.ToLower(base))
	} else {
		add(strings.ToUpper(name) + "_API_KEY")
	}
	return out
}

// Lookup returns the secret for name (a service or a credential key); ok
// is false when none is configured (or its env variable is unset).
func (f *File) Lookup(name string) (string, time.Time, bool) {
	_, v, exp, ok := f.Find(name)
	return v, exp, ok
}

// Find is Lookup that also says which entry of the file answered (the
// secret's identity: "anthropic" and "ANTHROPIC_API_KEY" may both be
// answered by the entry anthropic).
func (f *File) Find(name string) (entry, value string, expiresAt time.Time, ok bool) {
	if f == nil || name == "" {
		return "", "", time.Time{}, false
	}
	for _, n := range candidates(name) {
		e, ok := f.entries[n]
		if !ok {
			continue
		}
		v := e.value
		if e.env != "" {
			v = os.Getenv(e.env)
		}
		if v != "" {
			return n, v, e.expires, true
		}
	}
	return "", "", time.Time{}, false
}

// Names lists the configured names, sorted.
func (f *File) Names() []string { return slices.Sorted(maps.Keys(f.entries)) }
