package main

import (
	"fmt"
	"io"

	"github.com/orchestrd/orchestrd/daemon/httpapi"
)

const httpUsage = `orchestrd http key [--home DIR]

Prints the daemon's Loopsy API key (HOME/http.key, made at the daemon's
first start, or now): the Bearer key a loopsy client or peer presents.`

func cmdHTTP(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("http")
	home := homeFlag(fs)
	pos, code, ok := parseInterspersed(fs, httpUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] != "key" {
		return usageError(fs, httpUsage, stderr, "want: http key")
	}
	k, err := httpapi.LoadKey(resolveHome(*home))
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd http key: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, k)
	return exitOK
}
