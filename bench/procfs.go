package bench

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// CPUTimes is CPU time used, split by mode, and how often the threads
// blocked.
type CPUTimes struct {
	User time.Duration `json:"user_ns"`
	Sys  time.Duration `json:"sys_ns"`
	// Waits counts the voluntary context switches of every thread: each
	// is a thread that blocked (on a socket, a futex, a timer) and had to
	// be woken again, which is what a round trip's wake-ups cost.
	Waits uint64 `json:"waits,omitempty"`
}

// Total is user plus system time.
func (c CPUTimes) Total() time.Duration { return c.User + c.Sys }

// Sub is the CPU used between o and c.
func (c CPUTimes) Sub(o CPUTimes) CPUTimes {
	d := CPUTimes{User: c.User - o.User, Sys: c.Sys - o.Sys}
	if c.Waits > o.Waits {
		d.Waits = c.Waits - o.Waits
	}
	return d
}

// Usage is one process's resource use as the harness reports it.
type Usage struct {
	CPU CPUTimes `json:"cpu"`
	// MaxRSS is the peak resident set in bytes.
	MaxRSS int64 `json:"max_rss_bytes"`
	// ProgramMaxRSS is, for a server process that runs another program
	// (a redis-server), the peak resident set of the processes it started,
	// summed; zero for one that runs none. The runner reports it as the
	// server's peak in place of MaxRSS, which is then the wrapper's own.
	ProgramMaxRSS int64 `json:"program_max_rss_bytes,omitempty"`
}

// SelfUsage returns this process's usage, all threads included. Its peak
// resident set is VmHWM from /proc/self/status where there is one, not
// getrusage's ru_maxrss: Linux folds into ru_maxrss the peak of the memory
// the process had before its exec, and a child started by a Go program
// (clone with CLONE_VM, then exec) had its parent's. A benchmark child's
// ru_maxrss was so the harness's own peak whenever that was larger: an
// echo server of 25 MB reported 25, 48, 73, 97 and 120 MB in five
// consecutive runs, as the harness grew.
func SelfUsage() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, fmt.Errorf("getrusage: %w", err)
	}
	u := rusageToUsage(&ru)
	if hwm, ok := selfPeakRSS(); ok {
		u.MaxRSS = hwm
	}
	return u, nil
}

// selfPeakRSS reads this process's VmHWM; ok is false where /proc has none.
func selfPeakRSS() (int64, bool) {
	fs, err := proc()
	if err != nil {
		return 0, false
	}
	p, err := fs.Self()
	if err != nil {
		return 0, false
	}
	st, err := p.NewStatus()
	if err != nil || st.VmHWM == 0 {
		return 0, false
	}
	return int64(st.VmHWM), true
}

func rusageToUsage(ru *syscall.Rusage) Usage {
	return Usage{
		CPU: CPUTimes{
			User:  time.Duration(ru.Utime.Nano()),
			Sys:   time.Duration(ru.Stime.Nano()),
			Waits: uint64(ru.Nvcsw), // every thread's (RUSAGE_SELF)
		},
		// Linux reports ru_maxrss in KiB.
		MaxRSS: int64(ru.Maxrss) * 1024,
	}
}

// proc is /proc, read through prometheus/procfs; an error where there is
// none (the functions below then return zero values).
var proc = sync.OnceValues(procfs.NewDefaultFS)

// busy is the machine's non-idle CPU time in s, in seconds.
func busy(s procfs.CPUStat) float64 {
	return s.User + s.Nice + s.System + s.IRQ + s.SoftIRQ + s.Steal
}

// ReadProcStat reads the machine's CPU time by mode since boot (the cpu
// line of /proc/stat); ok is false where there is none.
func ReadProcStat() (procfs.CPUStat, bool) {
	fs, err := proc()
	if err != nil {
		return procfs.CPUStat{}, false
	}
	return cpuStatOf(fs)
}

func cpuStatOf(fs procfs.FS) (procfs.CPUStat, bool) {
	st, err := fs.Stat()
	if err != nil {
		return procfs.CPUStat{}, false
	}
	return st.CPUTotal, true
}

// Busyness is how busy the whole machine was between two /proc/stat reads.
type Busyness struct {
	// Busy and Steal are fractions of all CPU time in the interval.
	Busy  float64 `json:"busy"`
	Steal float64 `json:"steal"`
	// Seconds is the busy CPU time, comparable with the processes' CPU.
	Seconds float64 `json:"busy_cpu_seconds"`
}

// BusynessBetween compares two samples.
func BusynessBetween(a, b procfs.CPUStat) Busyness {
	total := func(s procfs.CPUStat) float64 { return busy(s) + s.Idle + s.Iowait }
	all := total(b) - total(a)
	if all <= 0 {
		return Busyness{}
	}
	used := busy(b) - busy(a)
	return Busyness{
		Busy:    used / all,
		Steal:   (b.Steal - a.Steal) / all,
		Seconds: used,
	}
}

// userHZ is the unit of a process's CPU times in /proc/<pid>/stat. Linux
// fixes USER_HZ at 100 for user space on every architecture Go supports,
// whatever the kernel's HZ.
const userHZ = 100

// CPUInfo is what /proc/cpuinfo says about the processors.
type CPUInfo struct {
	Model string `json:"model"`
	Count int    `json:"count"`
}

// Environment is the machine a report was measured on.
type Environment struct {
	GoVersion  string  `json:"go_version"`
	GOOS       string  `json:"goos"`
	GOARCH     string  `json:"goarch"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	NumCPU     int     `json:"num_cpu"`
	CPU        CPUInfo `json:"cpu"`
	Kernel     string  `json:"kernel"`
	Hostname   string  `json:"hostname"`
	// Topology states where the processes ran.
	Topology string    `json:"topology"`
	Started  time.Time `json:"started"`
}

// CollectEnvironment describes this machine. Missing /proc files leave
// fields empty rather than failing a benchmark.
func CollectEnvironment() Environment {
	env := Environment{
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		Topology:   "servers and clients are separate OS processes sharing this one host, over loopback",
		Started:    time.Now(),
	}
	if fs, err := proc(); err == nil {
		env.CPU = cpuInfoOf(fs)
		env.Kernel = kernelRelease(fs)
	}
	env.Hostname, _ = os.Hostname()
	return env
}

// kernelRelease is the kernel's name and release ("Linux 6.1.0-28-amd64").
func kernelRelease(fs procfs.FS) string {
	var parts []string
	for _, name := range []string{"kernel.ostype", "kernel.osrelease"} {
		if v, err := fs.SysctlStrings(name); err == nil {
			parts = append(parts, v...)
		}
	}
	return strings.Join(parts, " ")
}

// Descendants lists the live processes this one started, and theirs in
// turn, parents before children: a system under test whose server is
// another program (a Redis, say) runs it as a child of the harness's
// server process, and its CPU and memory are the server's. It reads every
// process's stat file in /proc (1.5 to 1.7 ms for 70 processes on the
// 2-core VM, through procfs); UsageOf then reads only theirs. Processes that exit in a race with the
// scan are skipped; it is empty where /proc is missing.
func Descendants() []int {
	fs, err := proc()
	if err != nil {
		return nil
	}
	return descendantsOf(fs, os.Getpid())
}

func descendantsOf(fs procfs.FS, root int) []int {
	procs, err := fs.AllProcs()
	if err != nil {
		return nil
	}
	sort.Sort(procs)
	children := map[int][]int{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], p.PID)
	}
	var out []int
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		out = append(out, children[queue[0]]...)
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// UsageOf is the CPU time used so far by the processes pids, summed, and
// the sum of their peak resident sets (VmHWM), read from /proc while they
// run; processes no longer alive count nothing.
func UsageOf(pids []int) Usage {
	fs, err := proc()
	if err != nil {
		return Usage{}
	}
	return usageOfPids(fs, pids)
}

func usageOfPids(fs procfs.FS, pids []int) Usage {
	var u Usage
	tick := time.Second / userHZ
	for _, pid := range pids {
		p, err := fs.Proc(pid)
		if err != nil {
			continue
		}
		st, err := p.Stat()
		if err != nil {
			continue
		}
		u.CPU.User += time.Duration(st.UTime) * tick
		u.CPU.Sys += time.Duration(st.STime) * tick
		u.CPU.Waits += threadWaits(fs, pid)
		if status, err := p.NewStatus(); err == nil {
			u.MaxRSS += int64(status.VmHWM)
		}
	}
	return u
}

// threadWaits sums the voluntary context switches of every thread of
// process pid (/proc/<pid>/task/*/status); 0 where /proc has none.
func threadWaits(fs procfs.FS, pid int) uint64 {
	threads, err := fs.AllThreads(pid)
	if err != nil {
		return 0
	}
	var n uint64
	for _, t := range threads {
		if st, err := t.NewStatus(); err == nil {
			n += st.VoluntaryCtxtSwitches
		}
	}
	return n
}
