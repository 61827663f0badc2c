package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const canary = "sk-canary-6b1f0e2d9c"

func write(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secrets.toml")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadAndLookup(t *testing.T) {
	t.Setenv("ORCH_TEST_OPENAI", "sk-from-env")
	p := write(t, `ANTHROPIC_API_KEY = "`+canary+`"
openai = { env = "ORCH_TEST_OPENAI" }
github = { value = "ghp-x", expires_at = 2030-01-02T03:04:05Z }
empty = { env = "ORCH_TEST_UNSET_VAR" }
`, 0o600)
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, want string }{
		{"ANTHROPIC_API_KEY", canary}, {"anthropic", canary}, {"openai", "sk-from-env"},
		{"OPENAI_API_KEY", "sk-from-env"}, {"GITHUB_TOKEN", "ghp-x"},
	} {
		v, _, ok := f.Lookup(c.name)
		if !ok || v != c.want {
			t.Errorf("Lookup(%s) = %v, want the configured value", c.name, ok)
		}
	}
	if _, exp, _ := f.Lookup("github"); exp.IsZero() || exp.Year() != 2030 {
		t.Errorf("github's expires_at = %v", exp)
	}
	for _, n := range []string{"empty", "nothing", ""} {
		if _, _, ok := f.Lookup(n); ok {
			t.Errorf("Lookup(%q) found a secret", n)
		}
	}
	if got := strings.Join(f.Names(), ","); got != "ANTHROPIC_API_KEY,empty,github,openai" {
		t.Errorf("Names = %s", got)
	}
}

func TestLoadRefuses(t *testing.T) {
	if f, err := Load(filepath.Join(t.TempDir(), "none.toml")); err != nil || len(f.Names()) != 0 {
		t.Fatalf("a missing file: %v, %v", f, err)
	}
	for _, c := range []struct {
		name, body string
		mode       os.FileMode
		want       string
	}{
		{"world readable", `a = "` + canary + `"`, 0o644, "readable by others (mode 0644): chmod 600"},
		{"group readable", `a = "` + canary + `"`, 0o640, "readable by others (mode 0640)"},
		{"bad TOML on the secret's line", `a = "` + canary + "\nb = " + canary + "\n", 0o600, "not valid TOML at line"},
		{"unknown key", `a = { value = "` + canary + `", bogus = 1 }`, 0o600, "unknown key a.bogus"},
		{"both value and env", `a = { value = "` + canary + `", env = "X" }`, 0o600, "a needs exactly one of value or env"},
		{"a number", `a = 12345678`, 0o600, "a must be a string or a table"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(t, c.body, c.mode))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load: %v, want an error saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), "canary") {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`a = "x"` + "\n" + `b = { env = "Y" }`))
	f.Add([]byte(`a = { value = "v", expires_at = "2030-01-01T00:00:00Z" }`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fl := &File{entries: map[string]entry{}}
		if err := fl.parse(b); err != nil {
			for _, e := range fl.entries {
				if e.value != "" && len(e.value) >= 8 && strings.Contains(err.Error(), e.value) {
					t.Fatalf("an error shows a value: %v", err)
				}
			}
		}
	})
}
