package api

// FrontEnd is one way into the daemon, as frontend.list, the ready line
// and orchestrd status show it: where it listens, or why it does not.
type FrontEnd struct {
	// Name is control, http, hook, "clanker REPO" or "lane NAME" (a lane
	// that takes bring-your-own runners).
	Name    string `json:"name"`
	Address string `json:"address,omitempty"` // a socket's path, a host:port
	// Off says why it does not serve ("" when it does): turned off by the
	// config ("[http] enabled = false") or failed at start ("127.0.0.1:19532
	// in use"; Failed then).
	Off    string `json:"off,omitempty"`
	Failed bool   `json:"failed,omitempty"`
}

// FrontEndList is the answer to frontend.list.
type FrontEndList struct {
	FrontEnds []FrontEnd `json:"frontends"`
}
