package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/orchestrd/orchestrd/api"
)

// The shared context and the peers are Loopsy's domain (package loopsy):
// each endpoint is one of its methods, called through the method table
// with the request's body as the client sent it; what it answers is the
// response's body.

// contextBodySlack is what a context PUT body may hold beside its value
// (the JSON around it, escapes).
const contextBodySlack = 64 << 10

// call calls method with params and decodes its answer into out (nil:
// not decoded).
func (s *Server) call(ctx context.Context, method string, params, out any) error {
	raw, err := s.invoke(ctx, method, params)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("reading the answer of %s: %w", method, err)
	}
	return nil
}

// invoke calls method with params: its answer as JSON.
func (s *Server) invoke(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if s.opts.Caller == nil {
		return nil, fmt.Errorf("calling %s: the HTTP API has no method table", method)
	}
	return s.opts.Caller.Invoke(ctx, api.Origin{By: byHTTP}, method, params, nil)
}

// loopsyStatus is the HTTP status of a Loopsy error code a method refused
// with.
func loopsyStatus(code int) int {
	switch code {
	case CodeContextNotFound, CodePeerNotFound, CodeJobNotFound:
		return http.StatusNotFound
	case CodeContextTooLarge, CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// writeCallErr answers err, a method's failure: a refusal with Loopsy's
// code (its Data) as that code, anything else as code 9001.
func (s *Server) writeCallErr(w http.ResponseWriter, err error) {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Data != nil {
		var d struct {
			LoopsyCode int `json:"loopsy_code"`
		}
		if b, jerr := json.Marshal(ae.Data); jerr == nil && json.Unmarshal(b, &d) == nil && d.LoopsyCode != 0 {
			writeError(w, loopsyStatus(d.LoopsyCode), d.LoopsyCode, ae.Message)
			return
		}
	}
	s.log.Error().Err(err).Msg("http: calling the daemon's method")
	writeError(w, http.StatusInternalServerError, CodeInternal, err.Error())
}

// answer calls method and answers with what it answers.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, method string, params any) {
	raw, err := s.invoke(r.Context(), method, params)
	if err != nil {
		s.writeCallErr(w, err)
		return
	}
	writeJSONBytes(w, http.StatusOK, raw)
}

func (s *Server) contextPut(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !decodeBodyMax(w, r, &body, int64(s.cfg.Context.MaxValueBytes)*6+contextBodySlack) {
		return
	}
	s.answer(w, r, "loopsy.context.put", map[string]any{"key": r.PathValue("key"), "body": body,
		"from": r.Header.Get("X-Loopsy-Node-Id")})
}

func (s *Server) contextGet(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "loopsy.context.get", map[string]any{"key": r.PathValue("key")})
}

func (s *Server) contextDelete(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "loopsy.context.delete", map[string]any{"key": r.PathValue("key")})
}

func (s *Server) contextList(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "loopsy.context.list", map[string]any{"prefix": r.URL.Query().Get("prefix")})
}

func (s *Server) peersList(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "loopsy.peer.list", nil)
}

func (s *Server) peersAdd(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !decodeBody(w, r, &body) {
		return
	}
	s.answer(w, r, "loopsy.peer.add", map[string]any{"body": body, "key_name": keyName(r)})
}

// peersHandshake records the peer and answers with this node's identity.
func (s *Server) peersHandshake(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !decodeBody(w, r, &body) {
		return
	}
	if err := s.call(r.Context(), "loopsy.peer.handshake", map[string]any{"body": body, "peer": r.RemoteAddr, "key_name": keyName(r)}, nil); err != nil {
		s.writeCallErr(w, err)
		return
	}
	id := s.identityBody()
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": id["nodeId"], "hostname": id["hostname"], "platform": id["platform"],
		"version": id["version"], "port": id["port"], "capabilities": id["capabilities"]})
}

func (s *Server) peersRemove(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "loopsy.peer.remove", map[string]any{"node_id": r.PathValue("nodeId"), "key_name": keyName(r)})
}
