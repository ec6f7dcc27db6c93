//go:build !linux

package origsut

import "syscall"

// sysProcAttr has nothing to set where there is no parent-death signal: a
// fero-bench process that dies without stopping Node leaves it running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
