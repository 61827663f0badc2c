package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// action is what a button does: the method it calls, with params built
// from the form (Params refuses a form it cannot make sense of, naming
// the field). Only registered actions can be taken from the dashboard:
// POST /ui/act/{name}.
type action struct {
	Name   string
	Method string
	Params func(f url.Values) (any, error)
	// Person: the button starts work in the person's name (chat.send), so
	// it is refused (403, conn.refused) to a process the daemon started,
	// whatever cookie and token it holds, as the start forms are.
	Person bool
	// Body bounds its form's body, maxFormBytes if 0 (a text box of n
	// bytes takes up to 3n URL-encoded: %XX a byte).
	Body int64
}

var actions = map[string]*action{}

// registerAction adds an action; called from init.
func registerAction(a *action) {
	if _, dup := actions[a.Name]; dup {
		panic("ui: action registered twice: " + a.Name)
	}
	actions[a.Name] = a
}

// act serves POST /ui/act/{action}: a form (or fetch) from a page. A
// fetch (Accept: application/json) gets {ok, result} or {ok: false,
// error}; a plain form is sent back to the page it came from.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	a, ok := actions[r.PathValue("action")]
	wantsJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	reply := func(status int, res json.RawMessage, err error) {
		if wantsJSON {
			body := map[string]any{"ok": err == nil}
			if err != nil {
				body["error"] = err.Error()
			} else if res != nil {
				body["result"] = res
			}
			b, _ := json.Marshal(body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			w.Write(b)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), status)
			return
		}
		http.Redirect(w, r, safeNext(r.PostFormValue("return")), http.StatusSeeOther)
	}
	if !ok {
		reply(http.StatusNotFound, nil, fmt.Errorf("no such action: %q", r.PathValue("action")))
		return
	}
	limit := a.Body
	if limit == 0 {
		limit = maxFormBytes
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		reply(http.StatusBadRequest, nil, fmt.Errorf("reading the form: %w", err))
		return
	}
	params, err := a.Params(r.PostForm)
	if err != nil {
		reply(http.StatusBadRequest, nil, err)
		return
	}
	if a.Person {
		if err := s.admitPeer(r, a.Method); err != nil {
			reply(http.StatusForbidden, nil, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	o := from(ctx)
	o.Admit = func() error { return s.admitPeer(r, a.Method) }
	res, err := s.opts.Caller.Invoke(ctx, o, a.Method, params, nil)
	if err != nil {
		reply(httpStatus(err), nil, err)
		return
	}
	reply(http.StatusOK, res, nil)
}

// httpStatus is the HTTP status for a method's error.
func httpStatus(err error) int {
	var ae *api.Error
	if !errors.As(err, &ae) {
		if errors.Is(err, context.DeadlineExceeded) {
			return http.StatusGatewayTimeout
		}
		return http.StatusInternalServerError
	}
	switch ae.Code {
	case api.CodeInvalidParams, api.CodeInvalidRequest:
		return http.StatusBadRequest
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeInvalidState:
		return http.StatusConflict
	case api.CodeUnauthorized:
		return http.StatusForbidden
	case api.CodeQueueFull:
		return http.StatusTooManyRequests
	case api.CodeShuttingDown:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Form helpers: each names the field it refuses.

func formID(f url.Values, field string) (string, error) {
	v := strings.TrimSpace(f.Get(field))
	if !validID(v) {
		return "", fmt.Errorf("%s: not an id: %q", field, clipForm(v))
	}
	return v, nil
}

func formBool(f url.Values, field string) (bool, error) {
	v := f.Get(field)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: want true or false, got %q", field, clipForm(v))
	}
	return b, nil
}

// stopParams is {id, force}, as job.cancel and task.stop take it.
func stopParams(f url.Values) (any, error) {
	id, err := formID(f, "id")
	if err != nil {
		return nil, err
	}
	force, err := formBool(f, "force")
	if err != nil {
		return nil, err
	}
	return map[string]any{"id": id, "force": force}, nil
}

func formText(f url.Values, field string, max int) (string, error) {
	v := f.Get(field)
	if len(v) > max {
		return "", fmt.Errorf("%s: at most %d bytes, got %d", field, max, len(v))
	}
	return v, nil
}

func clipForm(v string) string {
	if len(v) > 40 {
		return v[:40] + "..."
	}
	return v
}
