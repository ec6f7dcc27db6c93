package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUTimes is CPU time used, split by mode.
type CPUTimes struct {
	User time.Duration `json:"user_ns"`
	Sys  time.Duration `json:"sys_ns"`
}

// Total is user plus system time.
func (c CPUTimes) Total() time.Duration { return c.User + c.Sys }

// Sub is the CPU used between o and c.
func (c CPUTimes) Sub(o CPUTimes) CPUTimes { return CPUTimes{c.User - o.User, c.Sys - o.Sys} }

// Usage is one process's resource use as the harness reports it.
type Usage struct {
	CPU CPUTimes `json:"cpu"`
	// MaxRSS is the peak resident set in bytes.
	MaxRSS int64 `json:"max_rss_bytes"`
}

// SelfUsage returns this process's usage, all threads included.
func SelfUsage() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, fmt.Errorf("getrusage: %w", err)
	}
	return rusageToUsage(&ru), nil
}

func rusageToUsage(ru *syscall.Rusage) Usage {
	return Usage{
		CPU: CPUTimes{
			User: time.Duration(ru.Utime.Nano()),
			Sys:  time.Duration(ru.Stime.Nano()),
		},
		// Linux reports ru_maxrss in KiB.
		MaxRSS: int64(ru.Maxrss) * 1024,
	}
}

// CPUStat is the aggregate "cpu" line of /proc/stat, in clock ticks.
type CPUStat struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Busy is the non-idle ticks.
func (s CPUStat) Busy() uint64 {
	return s.User + s.Nice + s.System + s.IRQ + s.SoftIRQ + s.Steal
}

// Total is every tick.
func (s CPUStat) Total() uint64 { return s.Busy() + s.Idle + s.IOWait }

// ParseProcStat reads the aggregate cpu line from /proc/stat text.
func ParseProcStat(r io.Reader) (CPUStat, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// Older kernels stop before steal; missing fields stay zero.
		var v [8]uint64
		for i := 0; i < len(v) && i+1 < len(f); i++ {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return CPUStat{}, fmt.Errorf("/proc/stat cpu field %d: %w", i+1, err)
			}
			v[i] = n
		}
		if len(f) < 5 {
			return CPUStat{}, fmt.Errorf("/proc/stat cpu line too short: %q", sc.Text())
		}
		return CPUStat{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
	}
	if err := sc.Err(); err != nil {
		return CPUStat{}, fmt.Errorf("read /proc/stat: %w", err)
	}
	return CPUStat{}, fmt.Errorf("/proc/stat has no cpu line")
}

// ReadProcStat reads /proc/stat; ok is false where there is none.
func ReadProcStat() (CPUStat, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUStat{}, false
	}
	defer f.Close()
	s, err := ParseProcStat(f)
	return s, err == nil
}

// Busyness is how busy the whole machine was between two /proc/stat reads.
type Busyness struct {
	// Busy and Steal are fractions of all CPU time in the interval.
	Busy  float64 `json:"busy"`
	Steal float64 `json:"steal"`
	// Seconds is the busy CPU time, comparable with the processes' CPU.
	Seconds float64 `json:"busy_cpu_seconds"`
}

// BusynessBetween compares two samples. ticksPerSecond is USER_HZ.
func BusynessBetween(a, b CPUStat, ticksPerSecond float64) Busyness {
	total := float64(b.Total() - a.Total())
	if total <= 0 {
		return Busyness{}
	}
	busy := float64(b.Busy() - a.Busy())
	return Busyness{
		Busy:    busy / total,
		Steal:   float64(b.Steal-a.Steal) / total,
		Seconds: busy / ticksPerSecond,
	}
}

// userHZ is the unit of /proc/stat. Linux fixes USER_HZ at 100 for user
// space on every architecture Go supports, whatever the kernel's HZ.
const userHZ = 100

// CPUInfo is what /proc/cpuinfo says about the processors.
type CPUInfo struct {
	Model string `json:"model"`
	Count int    `json:"count"`
}

// ParseCPUInfo reads the model name and logical processor count from
// /proc/cpuinfo text.
func ParseCPUInfo(r io.Reader) (CPUInfo, error) {
	var ci CPUInfo
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			ci.Count++
		case "model name", "Model", "cpu model":
			if ci.Model == "" {
				ci.Model = strings.TrimSpace(v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return ci, fmt.Errorf("read /proc/cpuinfo: %w", err)
	}
	return ci, nil
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
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		env.CPU, _ = ParseCPUInfo(f)
		f.Close()
	}
	env.Kernel = kernelRelease()
	env.Hostname, _ = os.Hostname()
	return env
}

func kernelRelease() string {
	var parts []string
	for _, p := range []string{"/proc/sys/kernel/ostype", "/proc/sys/kernel/osrelease"} {
		if b, err := os.ReadFile(p); err == nil {
			parts = append(parts, strings.TrimSpace(string(b)))
		}
	}
	return strings.Join(parts, " ")
}

// procTimes is what the harness reads from one /proc/<pid>/stat line.
type procTimes struct {
	pid, ppid    int
	utime, stime uint64 // clock ticks (USER_HZ)
}

// parseProcPidStat parses a /proc/<pid>/stat line. The command name, in
// parentheses, may itself hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseProcPidStat(line string) (procTimes, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 1 || end < open {
		return procTimes{}, fmt.Errorf("stat line %q: no command name", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return procTimes{}, fmt.Errorf("stat line pid: %w", err)
	}
	// After the name: state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime …
	f := strings.Fields(line[end+1:])
	if len(f) < 13 {
		return procTimes{}, fmt.Errorf("stat line of pid %d: %d fields after the name", pid, len(f))
	}
	t := procTimes{pid: pid}
	if t.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procTimes{}, fmt.Errorf("stat line of pid %d: ppid: %w", pid, err)
	}
	if t.utime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return procTimes{}, fmt.Errorf("stat line of pid %d: utime: %w", pid, err)
	}
	if t.stime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return procTimes{}, fmt.Errorf("stat line of pid %d: stime: %w", pid, err)
	}
	return t, nil
}

// Descendants lists the live processes this one started, and theirs in
// turn: a system under test whose server is another program (a Redis,
// say) runs it as a child of the harness's server process, and its CPU
// is the server's. It reads every process's stat file in /proc, about a
// millisecond on a quiet machine; CPUOf then reads only theirs. Processes
// that exit in a race with the scan are skipped; it is empty where /proc
// is missing.
func Descendants() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		t, err := readProcPidStat(e.Name())
		if err != nil {
			continue
		}
		children[t.ppid] = append(children[t.ppid], t.pid)
	}
	var out []int
	for queue := []int{os.Getpid()}; len(queue) > 0; queue = queue[1:] {
		out = append(out, children[queue[0]]...)
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// CPUOf is the CPU time used so far by the processes pids; those no
// longer alive are skipped.
func CPUOf(pids []int) CPUTimes {
	var sum CPUTimes
	tick := time.Second / userHZ
	for _, pid := range pids {
		t, err := readProcPidStat(strconv.Itoa(pid))
		if err != nil {
			continue
		}
		sum.User += time.Duration(t.utime) * tick
		sum.Sys += time.Duration(t.stime) * tick
	}
	return sum
}

func readProcPidStat(pid string) (procTimes, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procTimes{}, err
	}
	return parseProcPidStat(strings.TrimSpace(string(b)))
}
