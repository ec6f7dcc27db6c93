//go:build !linux

package redissut

import "syscall"

// sysProcAttr has nothing to set where there is no parent-death signal: a
// serving process that dies without stopping Redis leaves it running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
