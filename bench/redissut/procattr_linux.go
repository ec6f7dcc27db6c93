package redissut

import "syscall"

// sysProcAttr has the kernel kill redis-server if the serving process dies
// without stopping it (killed by the harness, or crashed), so no Redis
// outlives a run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
