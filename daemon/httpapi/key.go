package httpapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// KeyFile is the daemon's own API key, in its home.
const KeyFile = "http.key"

// LoadKey reads home/http.key, making it (64 random hex characters and a
// newline, 0600) the first time. A key file others can read is refused.
func LoadKey(home string) (string, error) {
	k, err := ReadKey(home)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	path := filepath.Join(home, KeyFile)
	k = api.RandomHex(32)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadKey(home) // made by another start meanwhile
		}
		return "", fmt.Errorf("writing the HTTP API key: %w", err)
	}
	_, werr := f.WriteString(k + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return "", fmt.Errorf("writing the HTTP API key %s: %w", path, werr)
	}
	return k, nil
}

// ReadKey reads home/http.key and never makes it (the CLI's way: only the
// daemon writes its home); the error wraps fs.ErrNotExist when there is
// none yet. A key file others can read is refused.
func ReadKey(home string) (string, error) {
	path := filepath.Join(home, KeyFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the HTTP API key: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the HTTP API key %s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	k := strings.TrimSpace(string(b))
	if !hexKey().MatchString(k) {
		return "", fmt.Errorf("the HTTP API key %s is not 64 lowercase hex characters", path)
	}
	return k, nil
}
