package lanes

import (
	"os"
	"syscall"
)

// runnerSysProcAttr puts a runner in its own process group (so the whole
// group can be killed), ties it to the daemon's life with Pdeathsig, and for
// network "none" gives it a fresh network namespace: no interfaces but a
// loopback that is down, so its jobs reach nothing, not even the host's
// 127.0.0.1. Without root the namespace is made inside a new user namespace
// that maps only the daemon's own uid and gid.
func runnerSysProcAttr(network string) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if network != NetworkNone {
		return a
	}
	if os.Geteuid() == 0 {
		a.Cloneflags = syscall.CLONE_NEWNET
		return a
	}
	a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	a.GidMappingsEnableSetgroups = false
	return a
}
