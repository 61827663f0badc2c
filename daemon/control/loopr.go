package control

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// Loopr's real TUI and CLI (scottidler/loopr, v0.1.1) do not speak the
// spec's connect: their first request is initialize {version}, they ask
// for events with subscribe, and they read every line first as a response
// (a numeric id), then as an event {event, data}. These are the two
// methods of the protocol they need; the rest (status, chat.*, loop.*,
// plan.*) are registered by the daemon and its domains.

// LooprVersion is the Loopr release whose control protocol orchestrd
// speaks. initialize compares a client's major version with this one's,
// not with orchestrd's own: Loopr's client sends its own crate version
// (0.1.1), and orchestrd's version says nothing about Loopr's protocol.
const LooprVersion = "0.1.1"

// LooprProtocol is initialize's protocol: the one Loopr's client expects.
const LooprProtocol = "1.0"

// LooprKinds are the event kinds a subscribe gives the connection: what
// Loopr's TUI shows (its loops, the plan gate, the chat, the counts).
var LooprKinds = []string{"loop.*", "plan.*", "chat.*", "metrics.update"}

// maxClientVersion bounds the version a client may send: longer is not a
// version (and is not echoed back whole).
const maxClientVersion = 64

type (
	looprCapabilities struct {
		Chat   bool `json:"chat"`
		Loops  bool `json:"loops"`
		Events bool `json:"events"`
	}
	initializeResult struct {
		Version      string            `json:"version"` // orchestrd's
		Protocol     string            `json:"protocol"`
		Capabilities looprCapabilities `json:"capabilities"`
		// orchestrd's, after Loopr's.
		LooprVersion string `json:"loopr_version"` // whose protocol this is
		SessionID    string `json:"session_id"`
	}
	// VersionMismatchData is initialize's error data for a client of
	// another major version (Loopr's names, then orchestrd's).
	VersionMismatchData struct {
		ClientVersion string `json:"client_version"`
		DaemonVersion string `json:"daemon_version"` // orchestrd's
		LooprVersion  string `json:"loopr_version"`  // what the client's major was compared with
	}
	subscribeResult struct {
		Subscribed bool `json:"subscribed"`
	}
)

// looprParams decodes a Loopr client's params as serde does: members it
// does not know are ignored (its client may send more than it needs), a
// known one of the wrong type is refused. Absent params leave v as it is.
func looprParams(call *Call, v any) error {
	if len(call.params) == 0 {
		return nil
	}
	if err := json.Unmarshal(call.params, v); err != nil {
		return api.Errorf(api.CodeInvalidParams, "invalid params for %s: %v", call.method, err)
	}
	return nil
}

// initialize is Loopr's handshake: orchestrd's version, Loopr's protocol
// and what this daemon can do; a client of another major version than
// LooprVersion's is refused with CodeVersionMismatch.
func initialize(_ *actors.Context, call *Call) {
	var p struct {
		Version *string `json:"version"`
	}
	if err := looprParams(call, &p); err != nil {
		call.Fail(err)
		return
	}
	if p.Version == nil || strings.TrimSpace(*p.Version) == "" {
		call.Fail(api.Errorf(api.CodeInvalidParams,
			"invalid params for initialize: version is required (the client's version, as \"%s\")", LooprVersion))
		return
	}
	cn := call.cn
	client := *p.Version
	if !SameMajor(client, LooprVersion) {
		shown := client
		if len(shown) > maxClientVersion {
			shown = shown[:maxClientVersion] + "..."
		}
		call.Fail(&api.Error{Code: api.CodeVersionMismatch,
			Message: "version mismatch: client " + strconv.Quote(shown) + " is not a Loopr " + majorText(LooprVersion) +
				".x client; this daemon (orchestrd " + cn.srv.opts.Version + ") speaks Loopr " + LooprVersion + "'s protocol",
			Data: VersionMismatchData{ClientVersion: shown, DaemonVersion: cn.srv.opts.Version, LooprVersion: LooprVersion}})
		return
	}
	cn.ensureSession()
	call.Respond(initializeResult{Version: cn.srv.opts.Version, Protocol: LooprProtocol,
		Capabilities: looprCapabilities{Chat: true, Loops: true, Events: true},
		LooprVersion: LooprVersion, SessionID: cn.session})
}

// looprSubscribe is Loopr's subscribe: events.subscribe with LooprKinds,
// the same subscription (bounded, drop-oldest as the daemon's
// subscriber_overflow says), answered {subscribed: true}. Its params, if
// any, are ignored.
func looprSubscribe(_ *actors.Context, call *Call) {
	var p map[string]json.RawMessage
	if err := looprParams(call, &p); err != nil {
		call.Fail(err)
		return
	}
	cn := call.cn
	if cn.srv.bus == nil {
		call.Fail(api.Errorf(api.CodeInternal, "events are not available"))
		return
	}
	// As events.subscribe: the answer first, then every matching event.
	call.respondThen(subscribeResult{Subscribed: true}, func() { cn.subscribe(LooprKinds) })
}

// SameMajor reports whether versions a and b have the same major version
// (the number before the first dot; a leading v is allowed). A version
// whose major cannot be read matches nothing.
func SameMajor(a, b string) bool {
	ma, oka := major(a)
	mb, okb := major(b)
	return oka && okb && ma == mb
}

// major reads the major version of v: "0.1.1" -> 0, "v2.0.0-rc1" -> 2,
// "3" -> 3.
func major(v string) (uint64, bool) {
	v = strings.TrimSpace(v)
	v = strings.TrimPrefix(strings.TrimPrefix(v, "v"), "V")
	end := strings.IndexAny(v, ".-+")
	if end < 0 {
		end = len(v)
	}
	digits := v[:end]
	if digits == "" || len(digits) > 19 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

func majorText(v string) string {
	m, _ := major(v)
	return strconv.FormatUint(m, 10)
}
