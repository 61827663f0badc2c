package ui

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// admitPeer is the dashboard's check of who stands behind a request that
// answers for a person (a button calling a method only a person may call:
// approval.resolve, plan.approve...) or signs in: the process at the other
// end of its TCP connection, matched through /proc (proc.TCPStartedRefusal),
// may not be one the daemon started. A stolen key or session cookie gives
// an agent nothing here. Refused, conn.refused says who and why (what: the
// method, or the sign-in's route); the error is CodeUnauthorized (403).
// It reads /proc, so it runs for those requests only.
func (s *Server) admitPeer(r *http.Request, what string) error {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	la, isTCP := local.(*net.TCPAddr)
	client, err := netip.ParseAddrPort(r.RemoteAddr)
	if !isTCP || err != nil {
		// Served on something else than a TCP listener: nothing tells who
		// is behind it.
		s.emit(eventlog.ConnRefused{Socket: addrString(local), Peer: r.RemoteAddr, Method: what,
			Reason: "not a TCP connection: its process cannot be told"})
		return api.Errorf(api.CodeUnauthorized, "%s refused: the dashboard cannot tell which process calls", what)
	}
	pid, uid, err := proc.TCPStartedRefusal(la.AddrPort(), client)
	if err != nil {
		s.emit(eventlog.ConnRefused{Socket: la.String(), Peer: r.RemoteAddr, Pid: pid, UID: uid, Method: what, Reason: err.Error()})
		return api.Errorf(api.CodeUnauthorized, "%s refused: %v", what, err)
	}
	return nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
