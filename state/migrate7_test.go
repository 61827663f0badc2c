package state

import (
	"reflect"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// insertV1Job writes a queued job as a version-1 orchestrd wrote it (the
// columns it knew), so that the file can be upgraded from there.
func insertV1Job(t *testing.T, path, id string) {
	t.Helper()
	db := rawDB(t, path)
	if _, err := db.Exec(`INSERT INTO jobs(id, lane, state, created_at, command) VALUES(?, 'net', 'queued', ?, 'true')`,
		id, time.Now().UTC().Format(timeLayout)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO job_specs(seq, timeout_ms) VALUES(last_insert_rowid(), 5000)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
}

// A version-6 file gains the kill grace of specs and stopped_by of jobs:
// its jobs read back as before (no grace: the lane's; not stopped), and
// new ones keep both, 0 being a grace of its own (SIGKILL at once).
func TestMigrationToKillGrace(t *testing.T) {
	path := dbPath(t)
	old, err := open(path, testOpts, migrations[:6])
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	insertV1Job(t, path, "j-old")
	s := openT(t, path, testOpts)
	if v := userVersion(t, path); v != SchemaVersion() || v < 7 {
		t.Fatalf("user_version %d after the upgrade", v)
	}
	un, err := s.Jobs().Unfinished()
	if err != nil || len(un) != 1 || un[0].Spec.KillGraceMs != nil || un[0].Spec.TimeoutMs != 5000 {
		t.Fatalf("the old job: %+v %v", un, err)
	}
	old1 := un[0].Record
	old1.State, old1.Error = api.StateCancelled, "daemon_lost"
	if err := s.Jobs().Finish(ctx, old1); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := s.Jobs().Get("j-old"); rec.StoppedBy != "" || rec.State != api.StateCancelled {
		t.Fatalf("the old job, finished: %+v", rec)
	}

	for _, g := range []*uint64{graceMs(0), graceMs(60000), nil} {
		spec := api.JobSpec{Command: "sleep 9", KillGraceMs: g}
		if err := s.Jobs().Submit(ctx, submitted("j-new", "net", spec, time.Now()), spec); err != nil {
			t.Fatal(err)
		}
		un, err := s.Jobs().Unfinished()
		if err != nil || len(un) != 1 || !reflect.DeepEqual(un[0].Spec.KillGraceMs, g) {
			t.Fatalf("grace %v: %+v %v", g, un, err)
		}
		rec := un[0].Record
		rec.State, rec.WasCancelled, rec.StoppedBy = api.StateCancelled, true, "sigterm"
		if err := s.Jobs().Finish(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.Jobs().Get("j-new"); got.StoppedBy != "sigterm" {
			t.Fatalf("stopped_by: %+v", got)
		}
		if err := s.Do(ctx, &sqlWrite{query: "DELETE FROM jobs WHERE id = 'j-new'"}); err != nil {
			t.Fatal(err)
		}
	}
	bad := api.JobRecord{ID: "j-bad", Lane: "net", State: api.StateCancelled, StoppedBy: "sighup"}
	spec := api.JobSpec{Command: "x"}
	if err := s.Jobs().Submit(ctx, submitted("j-bad", "net", spec, time.Now()), spec); err != nil {
		t.Fatal(err)
	}
	if err := s.Jobs().Finish(ctx, bad); err == nil {
		t.Fatal("stopped_by sighup was recorded")
	}
}
