package bench

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sampleStat = `cpu  10132153 290696 3084719 46828483 16683 0 25195 175 0 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 0 0
intr 199292 0 0
ctxt 12345
`

func TestParseProcStat(t *testing.T) {
	s, err := ParseProcStat(strings.NewReader(sampleStat))
	require.NoError(t, err)
	assert.Equal(t, CPUStat{User: 10132153, Nice: 290696, System: 3084719, Idle: 46828483, IOWait: 16683, IRQ: 0, SoftIRQ: 25195, Steal: 175}, s)
	_, err = ParseProcStat(strings.NewReader("intr 1 2 3\n"))
	assert.Error(t, err)
	_, err = ParseProcStat(strings.NewReader("cpu 1 x 3 4\n"))
	assert.Error(t, err)
	// Old kernels without steal and beyond.
	s, err = ParseProcStat(strings.NewReader("cpu 1 2 3 4\n"))
	require.NoError(t, err)
	assert.EqualValues(t, 4, s.Idle)
}

func TestBusynessBetween(t *testing.T) {
	a := CPUStat{User: 100, System: 50, Idle: 850}
	b := CPUStat{User: 250, System: 100, Idle: 1050, Steal: 10}
	// 210 busy of 410 ticks.
	got := BusynessBetween(a, b, 100)
	assert.InDelta(t, 210.0/410, got.Busy, 1e-9)
	assert.InDelta(t, 10.0/410, got.Steal, 1e-9)
	assert.InDelta(t, 2.1, got.Seconds, 1e-9)
	assert.Equal(t, Busyness{}, BusynessBetween(a, a, 100))
}

const sampleCPUInfo = `processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B13
cpu MHz		: 2450.000

processor	: 1
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B13
`

func TestParseCPUInfo(t *testing.T) {
	ci, err := ParseCPUInfo(strings.NewReader(sampleCPUInfo))
	require.NoError(t, err)
	assert.Equal(t, CPUInfo{Model: "AMD EPYC 7B13", Count: 2}, ci)
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

func TestParseProcPidStat(t *testing.T) {
	// A command name with spaces and a ')' of its own.
	line := "4242 (a b) c)) S 17 4242 4242 0 -1 4194560 120 0 0 0 731 52 0 0 20 0 3 0 100 1000 200"
	got, err := parseProcPidStat(line)
	require.NoError(t, err)
	assert.Equal(t, procTimes{pid: 4242, ppid: 17, utime: 731, stime: 52}, got)

	for _, bad := range []string{"", "4242 no name", "x (n) S 1 2 3", "1 (n) S 1 2 3 4 5 6 7 8 9 10 11"} {
		_, err := parseProcPidStat(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestDescendantsCountAGrandchild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// A shell (our child) runs a busy loop in a subshell (our grandchild),
	// says when it is done, and stays alive.
	_, _, out := startShell(t, `(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done; exec sleep 60) & wait`)
	before := CPUOf(Descendants())
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	got := CPUOf(Descendants()).Sub(before)
	assert.Greater(t, got.Total(), time.Duration(0), "the grandchild's busy loop is counted")
}

func TestCPUOfReadsTheDescendantsFoundOnce(t *testing.T) {
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
	before := CPUOf(kids)
	_, err := io.WriteString(in, "go\n")
	require.NoError(t, err)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	assert.Greater(t, CPUOf(kids).Sub(before).Total(), time.Duration(0), "the grandchild's busy loop is counted")
	assert.Zero(t, CPUOf([]int{-1}).Total(), "a process that is gone counts nothing")
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
