package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionUsage = `orchestrd version

Prints the version, the commit the binary was built from ("(modified)"
when its tree had changes), the Go version and the platform, on one line.`

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version")
	if code, ok := parseFlags(fs, versionUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, versionUsage, stderr, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintln(stdout, versionLine())
	return exitOK
}

// commit is the commit the binary was built from when the build has no
// VCS stamp (go build -buildvcs=false, a tree outside git): set with
// -ldflags "-X main.commit=...".
var commit = ""

// versionLine is "orchestrd 0.1.0-dev, commit ae818ae1b2c3 (modified),
// go1.26.8 linux/amd64".
func versionLine() string {
	bi, _ := debug.ReadBuildInfo()
	return fmt.Sprintf("orchestrd %s, commit %s, %s %s/%s", version, buildCommit(bi), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildCommit is the commit of a build's VCS stamp, its first 12 digits,
// and " (modified)" when its tree had changes; else main.commit, else
// "unknown".
func buildCommit(bi *debug.BuildInfo) string {
	rev, modified := commit, ""
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value[:min(12, len(s.Value))]
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + modified
}
