package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/daemon/reachout"
	"github.com/orchestrd/orchestrd/platform/secrets"
)

const telegramImportUsage = `orchestrd approvals telegram import [--home DIR] [--from FILE] [--name NAME]

Takes over vibe-reachout's bot: reads its config (telegram_bot_token,
allowed_chat_ids, timeout_seconds; FILE defaults to
~/.config/vibe-reachout/config.toml), writes the token into the daemon's
secrets.toml as NAME (default telegram; mode 0600) and prints the
[approvals.telegram] table to add to the daemon's config. The config file
is never edited. An entry NAME already in secrets.toml is left as it is.`

// cmdApprovalsTelegram is `approvals telegram import`.
func cmdApprovalsTelegram(args []string, home string, stdout, stderr io.Writer) int {
	fs := newFlags("approvals telegram import")
	fs.StringVar(&home, "home", home, "daemon home `DIR` (default $ORCHESTRD_HOME or ~/.orchestrd)")
	from := fs.String("from", "", "vibe-reachout's config `FILE` (default ~/.config/vibe-reachout/config.toml)")
	name := fs.String("name", "telegram", "the token's `NAME` in secrets.toml")
	if len(args) == 0 || args[0] != "import" {
		return usageError(fs, telegramImportUsage, stderr, "the subcommand is import")
	}
	if code, ok := parseFlags(fs, telegramImportUsage, args[1:], stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, telegramImportUsage, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if *name == "" || strings.ContainsAny(*name, " \t\n\"'=[].:") {
		return usageError(fs, telegramImportUsage, stderr, "--name must be a plain TOML key (letters, digits, _ and -)")
	}
	file := *from
	if file == "" {
		if file = reachout.ConfigFile(); file == "" {
			return usageError(fs, telegramImportUsage, stderr, "no home to find vibe-reachout's config in: say --from FILE")
		}
	}
	bc, err := reachout.ReadBotConfig(file)
	if err != nil {
		fmt.Fprintln(stderr, "orchestrd:", err)
		return exitFailure
	}
	home = resolveHome(home)
	path := filepath.Join(home, daemon.SecretsFile)
	wrote, err := addSecret(path, *name, bc.Token)
	if err != nil {
		fmt.Fprintln(stderr, "orchestrd:", err)
		return exitFailure
	}
	if wrote {
		fmt.Fprintf(stdout, "wrote vibe-reachout's bot token into %s as %q (mode 0600)\n", path, *name)
	} else {
		fmt.Fprintf(stdout, "%s already holds %q: left as it is (this token was not written)\n", path, *name)
	}
	ids := make([]string, 0, len(bc.AllowedChatIDs))
	for _, id := range bc.AllowedChatIDs {
		ids = append(ids, fmt.Sprint(id))
	}
	fmt.Fprintf(stdout, "\nadd to %s (this command never edits it):\n\n", filepath.Join(home, "config.toml"))
	fmt.Fprintf(stdout, "[approvals.telegram]\ntoken = %q\nallowed_chat_ids = [%s]\n", *name, strings.Join(ids, ", "))
	if bc.TimeoutSeconds != nil {
		fmt.Fprintf(stdout, "timeout = \"%ds\"\n", *bc.TimeoutSeconds)
	}
	fmt.Fprintln(stdout, "\nthen stop vibe-reachout's bot (one poller a bot) and restart the daemon; the hook stays as it is.")
	return exitOK
}

// addSecret appends name = value to the secrets file at path (made 0600
// if missing), unless name is there already (false). The file is
// rewritten whole, through a temporary file; a file others can read is
// refused, as the daemon refuses it. Errors never hold the value.
func addSecret(path, name, value string) (bool, error) {
	sf, err := secrets.Load(path)
	if err != nil {
		return false, err
	}
	if slices.Contains(sf.Names(), name) {
		return false, nil
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	var b bytes.Buffer
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	if err := toml.NewEncoder(&b).Encode(map[string]string{name: value}); err != nil {
		return false, errors.New("encoding the token as TOML failed")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("making %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets-*.toml")
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := secrets.Load(path); err != nil { // what was written reads back
		return false, err
	}
	return true, nil
}
