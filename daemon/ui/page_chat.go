package ui

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// The chat: the daemon's one conversation with an agent ([loops]
// chat_executor, the `orchestrd chat` and Loopr's Chat tab), read as a
// conversation: each message a person sent (its task's prompt) and the
// agent's reply (its task's messages, as a task's page shows them), the
// permission requests of its tasks inline with their buttons. chat.get
// says where the conversation is, task.list and session.get read it;
// Send is chat.send, Stop the reply chat.cancel, New conversation
// chat.clear, as the CLI's.

// chatKinds change the chat page: the chat's own events (chat.chunk as
// the reply streams: the chat makes them whoever listens) and the
// permission requests of its tasks.
var chatKinds = []string{"chat.sent", "chat.chunk", "chat.tool_call", "chat.tool_result", "chat.replied",
	"chat.cancelled", "chat.cleared", "approval.requested", "approval.resolved", "approval.timed_out",
	"approval.cancelled", "approval.auto_resolved"}

const (
	// chatTurnsRead is how many of the conversation's last messages (its
	// tasks) the page shows.
	chatTurnsRead = 50
	// chatMessageMax bounds a message sent from the page.
	chatMessageMax = 32 << 10
	// chatFormBytes bounds Send's form: a message and a cwd at their
	// bounds, every byte URL-encoded (%XX), and the token.
	chatFormBytes = 3*(chatMessageMax+4096) + 1024
)

func init() {
	register(&page{Name: "chat", Title: "Chat", Pattern: "/ui/chat", Nav: true, Kinds: chatKinds, Data: chatData})
	registerAction(&action{Name: "chat.send", Method: "chat.send", Params: chatSendForm, Person: true, Body: chatFormBytes})
	registerAction(&action{Name: "chat.cancel", Method: "chat.cancel", Params: noParams})
	registerAction(&action{Name: "chat.clear", Method: "chat.clear", Params: noParams})
}

func noParams(url.Values) (any, error) { return nil, nil }

// chatSendForm is chat.send's params: message (required), cwd (an
// absolute path, optional).
func chatSendForm(f url.Values) (any, error) {
	msg, err := formText(f, "message", chatMessageMax)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(msg) == "" {
		return nil, api.Errorf(api.CodeInvalidParams, "message: it is empty: write what the agent is asked")
	}
	p := map[string]any{"message": msg}
	cwd, err := formText(f, "cwd", 4096)
	if err != nil {
		return nil, err
	}
	if cwd = strings.TrimSpace(cwd); cwd != "" {
		if !filepath.IsAbs(cwd) || strings.ContainsAny(cwd, "\x00\n\r") {
			return nil, api.Errorf(api.CodeInvalidParams, "cwd: want an absolute path, got %q", clipForm(cwd))
		}
		p["cwd"] = cwd
	}
	return p, nil
}

// chatView is the chat page.
type chatView struct {
	Off       bool // no [loops] chat_executor
	Executor  string
	SessionID string
	Ready     bool
	Streaming bool
	Turns     []chatTurn
	Earlier   bool // the conversation has more messages than shown
	Usage     *api.TokenUsage
	Problems  []string
}

// chatTurn is one message and its reply.
type chatTurn struct {
	Task   api.TaskRecord
	Items  []agentTaskItem
	Asking []apprItem
}

func chatData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var g struct {
		Executor  string `json:"executor"`
		SessionID string `json:"session_id"`
		Ready     bool   `json:"ready"`
		Streaming *struct {
			MessageID string `json:"message_id"`
		} `json:"streaming"`
	}
	if err := s.call(ctx, "chat.get", nil, &g); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeInvalidState {
			// Off: no pool for it. The page says how to turn it on.
			return chatView{Off: true}, nil
		}
		return nil, err
	}
	v := chatView{Executor: g.Executor, SessionID: g.SessionID, Ready: g.Ready, Streaming: g.Streaming != nil}
	if v.SessionID == "" {
		return v, nil
	}
	var tasks struct {
		Tasks     []api.TaskRecord `json:"tasks"`
		Truncated bool             `json:"truncated"`
	}
	if err := s.call(ctx, "task.list", map[string]any{"session_id": v.SessionID, "limit": chatTurnsRead}, &tasks); err != nil {
		v.Problems = append(v.Problems, "the conversation's messages: "+err.Error())
		return v, nil
	}
	v.Earlier = tasks.Truncated
	sort.SliceStable(tasks.Tasks, func(i, j int) bool { return tasks.Tasks[i].CreatedAt.Before(tasks.Tasks[j].CreatedAt) })
	var sess struct {
		Session  api.SessionRecord    `json:"session"`
		Messages []api.SessionMessage `json:"messages"`
	}
	if err := s.call(ctx, "session.get", map[string]any{"id": v.SessionID, "limit": agentMessagesRead}, &sess); err != nil {
		v.Problems = append(v.Problems, "the replies: "+err.Error())
	}
	v.Usage = sess.Session.TokenUsage
	byTask := map[string][]api.SessionMessage{}
	for _, m := range sess.Messages {
		byTask[m.TaskID] = append(byTask[m.TaskID], m)
	}
	var pending apprList
	if err := s.call(ctx, "approval.list", map[string]any{"state": "pending"}, &pending); err != nil {
		v.Problems = append(v.Problems, "the permission requests: "+err.Error())
	}
	cells := toolDiffPageCells
	for _, t := range tasks.Tasks {
		turn := chatTurn{Task: t, Items: agentTaskItems(byTask[t.ID], &cells)}
		for _, a := range pending.Approvals {
			if a.TaskID == t.ID {
				turn.Asking = append(turn.Asking, newApprItem(a, &cells))
			}
		}
		v.Turns = append(v.Turns, turn)
	}
	return v, nil
}
