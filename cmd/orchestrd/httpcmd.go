package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/orchestrd/orchestrd/daemon/httpapi"
)

const httpUsage = `orchestrd http key [--home DIR]

Prints the daemon's Loopsy API key (HOME/http.key, which the daemon makes
when it first starts on the home): the Bearer key a loopsy client or peer
presents. It only reads: without a key it says so and exits 1.`

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
	k, err := ownKey(resolveHome(*home))
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd http key: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, k)
	return exitOK
}

// ownKey is this home's daemon's Loopsy API key, read, never made: the
// daemon makes it.
func ownKey(home string) (string, error) {
	k, err := httpapi.ReadKey(home)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no HTTP API key at %s yet: the daemon makes it when it first starts on this home (orchestrd serve)",
			filepath.Join(home, httpapi.KeyFile))
	}
	return k, err
}
