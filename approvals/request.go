package approvals

import (
	"encoding/json"
	"time"

	"github.com/orchestrd/orchestrd/actors"
)

// Request is a question a front-end puts to Manager.Ask: may this tool run
// (kind tool), may this plan go ahead (kind plan), may this loop tree
// merge into its base (kind merge).
type Request struct {
	Source string // api.Source*
	Kind   string // api.Kind*
	// RequestID is the requester's own id (the hook's request_id, a
	// canonical lowercase hyphenated UUID); "" if it has none.
	RequestID             string
	ToolName              string
	ToolInput             json.RawMessage // a JSON object for kind tool
	Cwd                   string
	SessionID             string
	TaskID                string
	PermissionSuggestions []json.RawMessage
	AssistantContext      string
	Content               string          // kind plan (and merge: the question)
	Specs                 json.RawMessage // kind plan: a JSON array
	// LoopID is the loop a plan or merge is of (a loop's gate asks): the
	// plan.* events name it rather than the approval, as Loopr's client
	// expects.
	LoopID string
	// Timeout bounds how long it stays pending; 0 is Config.Timeout.
	Timeout time.Duration
	// Bound ties the approval to its requester's connection (the hook's):
	// cancelled when the requester goes, and after a daemon restart
	// (nobody is left to hear the answer).
	Bound bool
	// Requester, when not zero, is the requester's connection actor (the
	// hook's): the approval's actor links to it (actors.Link, each watches
	// the other), so that the requester's actor stopping (its peer gone,
	// a panic) cancels the approval (requester_gone) and the approval's
	// actor stopping is seen by the requester.
	Requester actors.Ref
	// Unheard, when set, is why the requester cannot act on any answer
	// (api.CancelHookNoVerdict): the approval is recorded cancelled with
	// it at once (approval.cancelled), no rule consulted, nobody asked,
	// so that what happened is on record and nothing answered is shown
	// as if it held.
	Unheard string
}

// Pending is an approval Ask started, for the front-end that asked.
type Pending interface {
	ID() string
	// Cancel ends the approval cancelled with reason if it is still
	// pending; Ask's answer func is still called once, with the cancelled
	// approval. Safe from any goroutine, any number of times.
	Cancel(reason string)
}
