package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeProc writes files (path relative to /proc: content) into a
// directory and opens it as /proc.
func fakeProc(t *testing.T, files map[string]string) procfs.FS {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	fs, err := procfs.NewFS(dir)
	require.NoError(t, err)
	return fs
}

const sampleStat = `cpu  10132153 290696 3084719 46828483 16683 0 25195 175 0 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 0 0
intr 199292 0 0
ctxt 12345
`

func TestReadProcStat(t *testing.T) {
	// /proc/stat counts ticks of 1/100 s; procfs gives seconds.
	s, ok := cpuStatOf(fakeProc(t, map[string]string{"stat": sampleStat}))
	require.True(t, ok)
	assert.InDelta(t, 101321.53, s.User, 1e-6)
	assert.InDelta(t, 468284.83, s.Idle, 1e-6)
	assert.InDelta(t, 1.75, s.Steal, 1e-6)
	_, ok = cpuStatOf(fakeProc(t, nil))
	assert.False(t, ok, "no /proc/stat")
	_, ok = ReadProcStat()
	if _, err := os.Stat("/proc/stat"); err == nil {
		assert.True(t, ok, "this machine's /proc/stat")
	}
}

func TestBusynessBetween(t *testing.T) {
	a := procfs.CPUStat{User: 1, System: 0.5, Idle: 8.5}
	b := procfs.CPUStat{User: 2.5, System: 1, Idle: 10.5, Steal: 0.1}
	// 2.1 s busy of 4.1 s.
	got := BusynessBetween(a, b)
	assert.InDelta(t, 2.1/4.1, got.Busy, 1e-9)
	assert.InDelta(t, 0.1/4.1, got.Steal, 1e-9)
	assert.InDelta(t, 2.1, got.Seconds, 1e-9)
	assert.Equal(t, Busyness{}, BusynessBetween(a, a))
}

const sampleCPUInfo = `processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B13
cpu MHz		: 2450.000

processor	: 1
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B13
`

func TestCPUInfoAndKernel(t *testing.T) {
	fs := fakeProc(t, map[string]string{
		"cpuinfo":              sampleCPUInfo,
		"sys/kernel/ostype":    "Linux\n",
		"sys/kernel/osrelease": "6.1.0-28-amd64\n",
	})
	assert.Equal(t, "Linux 6.1.0-28-amd64", kernelRelease(fs))
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" && runtime.GOARCH != "386" {
		t.Skip("the sample is an x86 Linux /proc/cpuinfo; procfs reads each architecture's own format, and only on Linux")
	}
	assert.Equal(t, CPUInfo{Model: "AMD EPYC 7B13", Count: 2}, cpuInfoOf(fs))
	assert.Equal(t, CPUInfo{}, cpuInfoOf(fakeProc(t, nil)))
}

func TestCPUTimes(t *testing.T) {
	a := CPUTimes{User: 3 * time.Second, Sys: time.Second}
	b := CPUTimes{User: time.Second, Sys: time.Second / 2}
	assert.Equal(t, CPUTimes{User: 2 * time.Second, Sys: time.Second / 2}, a.Sub(b))
	assert.Equal(t, 4*time.Second, a.Total())
}

func TestSelfUsage(t *testing.T) {
	u, err := SelfUsage()
	require.NoError(t, err)
	assert.Positive(t, u.MaxRSS)
}

// pidStat is a /proc/<pid>/stat line with ppid, utime and stime set, and
// a command name with spaces and a ')' of its own.
func pidStat(pid, ppid, utime, stime int) string {
	return fmt.Sprintf("%d (a b) c)) S %d %d %d 0 -1 4194560 120 0 0 0 %d %d 0 0 20 0 3 0 100 1000 200 "+
		"18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n", pid, ppid, pid, pid, utime, stime)
}

func TestDescendantsAndUsageFromProc(t *testing.T) {
	fs := fakeProc(t, map[string]string{
		"1/stat":    pidStat(1, 0, 1, 1),
		"10/stat":   pidStat(10, 1, 5, 5),
		"11/stat":   pidStat(11, 10, 731, 52),
		"11/status": "Name:\tredis-server\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n",
		"12/stat":   pidStat(12, 10, 100, 48),
		"12/status": "Name:\tsh\nVmHWM:\t    1024 kB\n",
		"13/stat":   pidStat(13, 11, 0, 0),
		"20/stat":   pidStat(20, 1, 9, 9),
		"self":      "not a process",
	})
	assert.Equal(t, []int{11, 12, 13}, descendantsOf(fs, 10), "children, then theirs")
	assert.Equal(t, []int{10, 20, 11, 12, 13}, descendantsOf(fs, 1))
	assert.Empty(t, descendantsOf(fs, 13))

	u := usageOfPids(fs, []int{11, 12, 99})
	assert.Equal(t, CPUTimes{User: 8310 * time.Millisecond, Sys: 1000 * time.Millisecond}, u.CPU, "ticks of 10 ms; pid 99 is gone")
	assert.EqualValues(t, (20480+1024)*1024, u.MaxRSS, "their peaks, summed")
}

func TestDescendantsCountAGrandchild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// A shell (our child) runs a busy loop in a subshell (our grandchild),
	// says when it is done, and stays alive.
	_, _, out := startShell(t, `(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done; exec sleep 60) & wait`)
	before := UsageOf(Descendants()).CPU
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	got := UsageOf(Descendants()).CPU.Sub(before)
	assert.Greater(t, got.Total(), time.Duration(0), "the grandchild's busy loop is counted")
}

func TestUsageOfReadsTheDescendantsFoundOnce(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// A shell (our child) starts a subshell (our grandchild) that waits
	// for a line, then runs a busy loop and stays alive.
	cmd, in, out := startShell(t, `(read go; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done; exec sleep 60) & wait`)
	// Both exist before the scan once the grandchild is waiting to read.
	var kids []int
	require.Eventually(t, func() bool {
		kids = Descendants()
		return len(kids) >= 2
	}, 10*time.Second, 10*time.Millisecond, "the shell and its subshell")
	assert.Equal(t, cmd.Process.Pid, kids[0], "breadth first: the child, then its own")
	before := UsageOf(kids)
	assert.Positive(t, before.MaxRSS, "the shell's and the subshell's peak RSS")
	_, err := io.WriteString(in, "go\n")
	require.NoError(t, err)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	assert.Greater(t, UsageOf(kids).CPU.Sub(before.CPU).Total(), time.Duration(0), "the grandchild's busy loop is counted")
	assert.Zero(t, UsageOf([]int{-1}), "a process that is gone counts nothing")
}

// startShell runs script in a shell, our child, in a process group of its
// own that the test's cleanup kills; it returns the shell's stdin and
// stdout.
func startShell(t *testing.T, script string) (*exec.Cmd, io.Writer, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, in, bufio.NewReader(out)
}

func TestTailKeepsTheLastBytes(t *testing.T) {
	tl := NewTail(8)
	_, _ = io.WriteString(tl, "abc")
	assert.Equal(t, "abc", tl.String())
	_, _ = io.WriteString(tl, "defghij")
	assert.Equal(t, "cdefghij", tl.String(), "the oldest bytes go first")
	n, err := io.WriteString(tl, " klmnopqrstu ")
	require.NoError(t, err)
	assert.Equal(t, 13, n, "a write longer than the bound is taken whole")
	assert.Equal(t, "opqrstu", tl.String(), "the last 8 bytes, trimmed of surrounding space")
}

func TestInterruptRead(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	buf := make([]byte, 1)

	// ctx ends while the read waits: the read fails.
	ctx, cancel := context.WithCancel(context.Background())
	done := InterruptRead(ctx, a)
	time.AfterFunc(10*time.Millisecond, cancel)
	_, err := a.Read(buf)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	done()

	// Once done, the deadline is cleared again: the next read works.
	go func() { _, _ = b.Write([]byte("x")) }()
	n, err := a.Read(buf)
	require.NoError(t, err, "the deadline was cleared")
	assert.Equal(t, "x", string(buf[:n]))

	// A read over before ctx ends leaves no deadline behind either.
	ctx2, cancel2 := context.WithCancel(context.Background())
	done = InterruptRead(ctx2, a)
	go func() { _, _ = b.Write([]byte("y")) }()
	_, err = a.Read(buf)
	require.NoError(t, err)
	done()
	cancel2()
	go func() { _, _ = b.Write([]byte("z")) }()
	n, err = a.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "z", string(buf[:n]))

	// Without a Done channel there is nothing to watch.
	InterruptRead(context.Background(), a)()
}

// TestSelfUsageCountsWaits: a thread that blocks counts a wait (a
// voluntary context switch) in SelfUsage, which the report turns into
// wake-ups per record.
func TestSelfUsageCountsWaits(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: getrusage's context switches are Linux's")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := SelfUsage()
	require.NoError(t, err)
	for range 5 {
		time.Sleep(2 * time.Millisecond) // the locked thread blocks
	}
	after, err := SelfUsage()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, after.CPU.Sub(before.CPU).Waits, uint64(1), "five sleeps on a locked thread")
	assert.Equal(t, uint64(0), before.CPU.Sub(after.CPU).Waits, "a count never goes negative")
}
