package bench

import "github.com/prometheus/procfs"

// cpuInfoOf reads the first model name and the logical processor count
// from /proc/cpuinfo; empty where it cannot.
func cpuInfoOf(fs procfs.FS) CPUInfo {
	cpus, err := fs.CPUInfo()
	if err != nil {
		return CPUInfo{}
	}
	ci := CPUInfo{Count: len(cpus)}
	for _, c := range cpus {
		if c.ModelName != "" {
			ci.Model = c.ModelName
			break
		}
	}
	return ci
}
