package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// hashJob is a job printing the SHA-256 of $VAR, never its value.
func hashJob(v string) string { return `printf %s "$` + v + `" | sha256sum | cut -c1-64` }

// noCanary fails when a file of the home but secrets.toml (state.db, its
// WAL when there is one, the event log) holds one of the canaries.
func noCanary(t *testing.T, home, when string, canaries ...string) {
	t.Helper()
	entries, err := os.ReadDir(home)
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, e := range entries {
		if e.Name() == "secrets.toml" || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(home, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "state.db" && len(b) > 0 {
			read++
		}
		for _, c := range canaries {
			if bytes.Contains(b, []byte(c)) {
				t.Errorf("%s: %s holds a secret's value", when, e.Name())
			}
		}
	}
	if read != 1 {
		t.Fatalf("%s: no state.db in %s", when, home)
	}
}

// run --secret gives a job a secret of secrets.toml by name, looked up at
// dispatch: the job has the value; state.db, its WAL, the event log, the
// daemon's log, job.get and job.list never do, nor does a queued job's spec that a
// daemon killed with -9 left (its names are kept: the next daemon looks
// them up again, and fails the job secret_missing when one is gone). An
// unknown name is refused at submission; run --help says that --env values
// are stored.
func TestRunSecret(t *testing.T) {
	t.Parallel()
	const (
		printed = "printed-canary-0b6f5d21" // echoed by a job: its output, stored as such
		deploy  = "deploy-canary-9e47c3aa"
		key     = "sk-key-canary-1d2e8f60"
	)
	home := shortTemp(t)
	writeSecrets := func(s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeSecrets("PRINTED = \"" + printed + "\"\nDEPLOY_TOKEN = \"" + deploy + "\"\nanthropic = { value = \"" + key + "\" }\n")
	d := startDaemonAt(t, home, holdLanes)

	out, errOut, code := runCLI(t, "--home", home, "run", "--lane", "work", "--secret", "PRINTED", "--", "sh", "-c", `echo "$PRINTED"`)
	if code != 0 || out != printed+"\n" {
		t.Fatalf("run --secret PRINTED: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// VAR=NAME, and a name the file's key answers to (anthropic).
	out, errOut, code = runCLI(t, "--home", home, "run", "--lane", "work", "--secret", "DEPLOY_TOKEN", "--secret", "KEY=anthropic",
		"--secret", "ANTHROPIC_API_KEY", "--", "sh", "-c", hashJob("DEPLOY_TOKEN")+"; "+hashJob("KEY")+"; "+hashJob("ANTHROPIC_API_KEY"))
	if want := sha([]byte(deploy)) + "\n" + sha([]byte(key)) + "\n" + sha([]byte(key)) + "\n"; code != 0 || out != want {
		t.Fatalf("run --secret DEPLOY_TOKEN KEY=anthropic ANTHROPIC_API_KEY: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret", "NOPE"}, `orchestrd: no secret "NOPE" in the daemon's secrets.toml (for NOPE)` + "\n"},
		{[]string{"--secret", "X=nope"}, `orchestrd: no secret "nope" in the daemon's secrets.toml (for X)` + "\n"},
		{[]string{"--env", "DEPLOY_TOKEN=x", "--secret", "DEPLOY_TOKEN"}, "orchestrd: DEPLOY_TOKEN is given both by env and by secrets\n"},
	} {
		args := append(append([]string{"--home", home, "run", "--lane", "work"}, c.args...), "--", "true")
		if _, errOut, code := runCLI(t, args...); code != 1 || errOut != c.want {
			t.Errorf("run %v: exit %d, stderr %q; want exit 1 and %q", c.args, code, errOut, c.want)
		}
	}
	if out, _, _ := runCLI(t, "run", "--help"); !strings.Contains(out, "--env values are stored") {
		t.Errorf("run --help does not say that --env values are stored:\n%s", out)
	}

	// Queued (the hold lane has no runner) when the daemon dies.
	queued := d.submit(api.JobSpec{Lane: "hold", Command: hashJob("DEPLOY_TOKEN"), Secrets: map[string]string{"DEPLOY_TOKEN": "DEPLOY_TOKEN"}})
	gone := d.submit(api.JobSpec{Lane: "hold", Command: hashJob("KEY"), Secrets: map[string]string{"KEY": "anthropic"}})
	var listed bytes.Buffer
	for _, args := range [][]string{{"jobs", "--json"}, {"job", "--json", queued}} {
		out, errOut, code := runCLI(t, append([]string{"--home", home}, args...)...)
		if code != 0 {
			t.Fatalf("orchestrd %v: exit %d: %s", args, code, errOut)
		}
		listed.WriteString(out)
	}
	if !strings.Contains(listed.String(), queued) || strings.Contains(listed.String(), deploy) || strings.Contains(listed.String(), key) {
		t.Fatalf("job.list and job.get: want the job, without a secret's value:\n%s", listed.String())
	}
	d.kill9()
	if _, err := os.Stat(filepath.Join(home, "state.db-wal")); err != nil {
		t.Fatalf("no WAL after kill -9: %v", err)
	}
	noCanary(t, home, "after kill -9", deploy, key)

	writeSecrets("DEPLOY_TOKEN = \"" + deploy + "\"\n") // anthropic is gone
	d2 := startDaemonAt(t, home, strings.Replace(holdLanes, "runners = 0", "runners = 1\nspares = 0", 1))
	var got struct{ Job api.JobRecord }
	if r := d2.wait(queued); r.State != api.StateSucceeded {
		t.Fatalf("the queued job after the restart: %+v", r)
	}
	d2.mustCall("job.get", map[string]any{"id": queued}, &got)
	if got.Job.Output != sha([]byte(deploy))+"\n" {
		t.Fatalf("the queued job after the restart printed %q, want the hash of its secret", got.Job.Output)
	}
	if r := d2.wait(gone); r.State != api.StateFailed || r.Error != api.ErrSecretMissing {
		t.Fatalf("the queued job whose secret is gone: %s (%s), want failed %s", r.State, r.Error, api.ErrSecretMissing)
	}
	d2.stop()
	noCanary(t, home, "after the restart", deploy, key)
	for _, log := range []string{d.stderr.String(), d2.stderr.String()} {
		if strings.Contains(log, deploy) || strings.Contains(log, key) {
			t.Errorf("a secret's value is in the daemon's log:\n%s", log)
		}
	}
}
