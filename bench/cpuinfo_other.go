//go:build !linux

package bench

import "github.com/prometheus/procfs"

// cpuInfoOf is empty: procfs reads /proc/cpuinfo only on Linux.
func cpuInfoOf(procfs.FS) CPUInfo { return CPUInfo{} }
