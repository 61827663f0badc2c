package sockserve

import (
	"bufio"
	"errors"
	"net"
	"net/http"
)

// StreamHandler makes each request h serves a connection actor of kind
// under sup (Stream): for an HTTP front-end's long-lived streams (server-
// sent events, a job's output), whose lifetime the actor owns. h runs on
// the request's goroutine with a context the actor cancels when it stops;
// a panic in h is the actor's (actor.panicked, that stream alone aborted:
// its client sees the response cut, all HTTP lets it be told once the
// status is sent). The bytes h has written and not yet flushed are its
// queued bytes. nil sup: h itself.
func StreamHandler(sup *Supervisor, kind string, h http.HandlerFunc) http.HandlerFunc {
	if sup == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		st, ctx, _ := sup.Stream(r.Context(), kind, r.RemoteAddr)
		defer func() {
			rec := recover()
			if errors.Is(asError(rec), http.ErrAbortHandler) {
				st.End(nil)
				panic(rec) // the handler's own abort, not a failure
			}
			if st.End(rec) {
				panic(http.ErrAbortHandler)
			}
		}()
		h(&countingWriter{ResponseWriter: w, c: st.Conn()}, r.WithContext(ctx))
	}
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}

// countingWriter counts the bytes written since the last flush as the
// stream's queued bytes.
type countingWriter struct {
	http.ResponseWriter
	c       *Conn
	pending int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.pending += int64(n)
	w.c.Queued(int64(n))
	return n, err
}

// FlushError flushes (http.ResponseController finds it).
func (w *countingWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil {
		w.c.Queued(-w.pending)
		w.pending = 0
	}
	return err
}

func (w *countingWriter) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the writer beneath
// (deadlines).
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack is the writer beneath's, if it can.
func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}
