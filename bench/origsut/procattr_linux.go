package origsut

import "syscall"

// sysProcAttr has the kernel kill a Node process if the fero-bench process
// that started it dies without stopping it, so none outlives a run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
