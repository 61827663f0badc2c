package telegram

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// botAPI serves a scripted Bot API on loopback until the test ends:
// getUpdates waits 100 ms (or the caller's going) and answers no update;
// sendMessage hands its request's body to sent and answers message 5 in
// chat 1; any other method answers true. It returns the URL to give as
// TelegramConfig.APIURL.
func botAPI(t *testing.T, sent func(p map[string]any)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		switch {
		case strings.HasSuffix(r.URL.Path, "/getUpdates"):
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
			}
			_, _ = w.Write([]byte(`{"ok":true,"result":[]}`))
		case strings.HasSuffix(r.URL.Path, "/sendMessage"):
			sent(p)
			_, _ = w.Write([]byte(`{"ok":true,"result":{"message_id":5,"chat":{"id":1}}}`))
		default:
			_, _ = w.Write([]byte(`{"ok":true,"result":true}`))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// spawner is the part of an Answerer the bot's tests share: it spawns the
// bot's actor on sys and hands its ref to refs; it finds and answers no
// approval.
type spawner struct {
	sys  *actors.System
	refs chan actors.Ref
}

func (s *spawner) Get(string) (api.Approval, bool, error)                                 { return api.Approval{}, false, nil }
func (s *spawner) Answer(string, api.Decision, api.Resolution, func(api.Approval, error)) {}
func (s *spawner) SpawnChild(pr actors.Props, done func(actors.Ref, error)) {
	r, err := s.sys.Spawn(pr)
	done(r, err)
	s.refs <- r
}

// stopBot stops the bot's actor and waits (10 s at the most) for its end.
func stopBot(t *testing.T, sys *actors.System, ref actors.Ref) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sys.Stop(ctx, ref); err != nil {
		t.Fatal(err)
	}
}
