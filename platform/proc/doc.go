// Package proc is orchestrd's domain-free process machinery: a supervised
// child process as an Incarnation (started, watched and killed as a process
// group, its start and exit reported to the caller), the child subreaper
// that reaps (and, for the daemon, kills) processes that lost their
// parent, cgroup v2 job tracking, the one policy of the unix sockets the
// daemon serves (ListenUnix, CheckSameUID), the one rule by which every
// door refuses the processes the daemon started (StartedRefusal, and
// TCPStartedRefusal for a TCP peer matched to its process through
// /proc/net/tcp), and the sandbox a runner puts
// around the jobs it starts (a private mount namespace that hides paths, a
// spawner thread without capabilities and with no_new_privs).
//
// It knows nothing of lanes, runners or jobs: callers name what they
// track and decide what to report.
package proc
