package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

const uiUsage = `orchestrd ui [--home DIR]

Prints a one-time link that signs a browser in to the daemon's dashboard
(/ui/ on its HTTP listener). The link is good once, for [ui] link_ttl (2m);
it opens nothing by itself. Or sign in with the key: orchestrd http key.`

func cmdUI(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ui")
	home := homeFlag(fs)
	pos, code, ok := parseInterspersed(fs, uiUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(fs, uiUsage, stderr, "ui takes no arguments")
	}
	c, ok := dial(resolveHome(*home), stderr)
	if !ok {
		return exitFailure
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var info struct {
		Addr string `json:"addr"`
		TLS  bool   `json:"tls"`
	}
	if err := c.Call(ctx, "http.info", nil, &info); err != nil {
		fmt.Fprintf(stderr, "orchestrd ui: the dashboard is on the HTTP listener, and %s\n", errMessage(err))
		return exitFailure
	}
	var link struct {
		Path      string    `json:"path"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := c.Call(ctx, "ui.login_link", nil, &link); err != nil {
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeMethodNotFound {
			fmt.Fprintln(stderr, "orchestrd ui: the dashboard is off ([ui] enabled = false)")
			return exitFailure
		}
		fmt.Fprintf(stderr, "orchestrd ui: asking for a sign-in link: %s\n", errMessage(err))
		return exitFailure
	}
	host, port, err := net.SplitHostPort(info.Addr)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd ui: the daemon's HTTP address %q: %v\n", info.Addr, err)
		return exitFailure
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http"
	if info.TLS {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "%s://%s%s\n", scheme, net.JoinHostPort(host, port), link.Path)
	fmt.Fprintf(stderr, "orchestrd ui: the link signs in once, until %s\n", link.ExpiresAt.Local().Format("15:04:05"))
	return exitOK
}
