package uitest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	_ "modernc.org/sqlite"

	"github.com/orchestrd/orchestrd/api"
)

// restartJob is what each job of TestOutputReadAgainAfterRestart runs: its
// id, lines of text (not all ASCII), then it waits for a file ($1) that
// never comes: it is running when the daemon goes.
const restartJob = `echo "id=$ORCHESTRD_JOB_ID"
i=0; while [ $i -lt 400 ]; do printf 'line %d: café ✓ naïve\n' $i; i=$((i+1)); done
echo "before the restart"
while [ ! -e "$1" ]; do sleep 0.05; done
echo "never written"`

// restartJobOutput is what restartJob writes before it waits.
func restartJobOutput(id string) string {
	var b strings.Builder
	b.WriteString("id=" + id + "\n")
	for i := range 400 {
		fmt.Fprintf(&b, "line %d: café ✓ naïve\n", i)
	}
	b.WriteString("before the restart\n")
	return b.String()
}

// A job's page open while the job writes, and the daemon goes away:
// stopped cleanly (its running jobs end cancelled) and killed with
// SIGKILL (the next daemon ends the job failed daemon_lost, with the
// output the store had of it). No job outlives its daemon, so the page
// shows, once the daemon is back, the job ended while the daemon was
// away: its output read again from its start, byte for byte what the job
// wrote, none of it twice, the byte count the record's, the job's final
// state, and the view at the output's end where the person can scroll.
func TestOutputReadAgainAfterRestart(t *testing.T) {
	d, tb := signedIn(t, config{samePort: true})
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.home, "state.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const atEnd = `(() => { const p = document.getElementById("output"); return p.scrollHeight > p.clientHeight + 100 && p.scrollTop + p.clientHeight >= p.scrollHeight - 4; })()`
	for _, how := range []string{"stop", "kill"} {
		never := filepath.Join(t.TempDir(), "never")
		r := d.startCLI("run", "--lane", "net", "--", "sh", "-c", restartJob, "sh", never)
		id := r.line(t, "id=")
		want := restartJobOutput(id)
		tb.open("/ui/jobs/" + id)
		tb.waitText("#output", "before the restart\n")
		tb.waitJS("the output followed to its end", atEnd)
		if how == "kill" {
			// What survives a SIGKILL is what the store has: wait until it
			// has all the job wrote (it writes a running job's output once a
			// second).
			deadline := time.Now().Add(waitDeadline)
			for {
				out, _ := streamedOutput(db, id)
				if out == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("state.db has %d bytes of job %s's output after %s, want %d", len(out), id, waitDeadline, len(want))
				}
				time.Sleep(50 * time.Millisecond)
			}
		}

		// The daemon goes; the page says what it lost.
		old := d.runners
		d.runners = nil
		if how == "kill" {
			if err := d.proc.Cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-d.proc.Done()
		} else {
			d.stop()
			waitGone(t, old)
		}
		tb.waitJS("the page to see the daemon gone", `document.body.dataset.stream === "reconnecting"`)
		if how == "kill" {
			tb.waitText("#output-state", "the output stream was lost: read again once the daemon answers")
		}
		away := eval[string](tb, `document.getElementById("output-state").textContent`)
		tb.shot("away-" + how)
		d.launch()       // the new daemon is stopped when the test ends
		waitGone(t, old) // what a killed daemon left, the next one ends

		tb.waitJS("the tab to reconnect after the "+how, `document.body.dataset.reconnected === "1"`) // a page of its own
		tb.waitJS("the output's end", `document.getElementById("output").dataset.ended === "true" && !document.getElementById("output").dataset.lost`)
		rec := d.job(id)
		wantState, wantErr := api.StateCancelled, api.ErrDaemonShutdown
		if how == "kill" {
			wantState, wantErr = api.StateFailed, api.ErrDaemonLost
		}
		if rec.State != wantState || rec.Error != wantErr {
			t.Fatalf("after the %s job %s is %s (%q), want %s (%q)", how, id, rec.State, rec.Error, wantState, wantErr)
		}
		tb.waitJS("the job's final state shown", `document.querySelector("h1 .state").textContent === `+jsID(string(wantState))+
			` && !document.getElementById("main").classList.contains("stale")`)
		tb.waitText("main", wantErr)

		// Its output, read again: what the job wrote, once.
		shown := eval[string](tb, `document.getElementById("output").textContent`)
		if shown != want {
			t.Fatalf("after the %s (the page said %q while the daemon was away) the output shows %d bytes, want the %d the job wrote; its end:\n%s",
				how, away, len(shown), len(want), tail(shown, 600))
		}
		if rec.Output != want || rec.OutputBytes != int64(len(want)) {
			t.Fatalf("after the %s the record keeps %d bytes (counts %d), want %d", how, len(rec.Output), rec.OutputBytes, len(want))
		}
		size := strconv.Itoa(len(want))
		if got := eval[string](tb, `(() => { const o = document.getElementById("output"); return o.dataset.written + " " + o.dataset.bytes; })()`); got != size+" "+size {
			t.Fatalf("after the %s the page counted (written, shown) %s bytes, want %s", how, got, size)
		}
		if st := eval[string](tb, `document.getElementById("output-state").textContent`); st != "ended: "+size+" bytes shown" {
			t.Fatalf("after the %s the output says %q", how, st)
		}
		if !strings.Contains(eval[string](tb, `document.querySelector("dl.record").textContent`), "Output"+size+" bytes") {
			t.Fatalf("after the %s the record on the page says %q", how, eval[string](tb, `document.querySelector("dl.record").textContent`))
		}
		if c := eval[int](tb, `document.querySelectorAll("#output, #output-state, #output-follow").length`); c != 3 {
			t.Fatalf("after the %s the page has %d output elements, want 3", how, c)
		}

		// The view: at the output's end; the person scrolls up and back.
		// Resized (the screenshots are taken at a phone's size too), it
		// stays there.
		tb.waitJS("the output read again at its end", atEnd)
		tb.shot("read-again-" + how)
		tb.waitJS("the output at its end after the page was resized", atEnd)
		eval[chromedp.Void](tb, `document.getElementById("output").scrollTop = 0`)
		tb.waitJS("scrolled up, not following", `document.getElementById("output").dataset.follow === "false"`)
		if top := eval[int](tb, `document.getElementById("output").scrollTop`); top != 0 {
			t.Fatalf("after the %s, scrolled up, the output moved to %d", how, top)
		}
		if !eval[bool](tb, `document.getElementById("output-follow").hidden`) {
			t.Fatalf("after the %s Follow shows for an output that ended", how)
		}
		eval[chromedp.Void](tb, `(() => { const p = document.getElementById("output"); p.scrollTop = p.scrollHeight; })()`)
		tb.waitJS("scrolled back to the end, following", atEnd+` && document.getElementById("output").dataset.follow === "true"`)
	}
}

// streamedOutput is what state.db holds of a job's output, its pieces
// joined ("" while it has none).
func streamedOutput(db *sql.DB, id string) (string, error) {
	rows, err := db.Query(`SELECT o.data FROM job_output o JOIN jobs j USING (seq) WHERE j.id = ? ORDER BY o.off`, id)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return "", err
		}
		b.Write(data)
	}
	return b.String(), rows.Err()
}
