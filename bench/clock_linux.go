package bench

import (
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preciseSleep sleeps for a short d on the calling OS thread. Go's timers
// wake through the network poller, whose epoll wait rounds up to whole
// milliseconds when the process is otherwise idle, so a 50 µs pause can
// take a millisecond. nanosleep with the thread's timer slack cut from its
// 50 µs default to 1 ns wakes within a few microseconds. The runtime hands
// this thread's P to another thread while it sleeps.
func preciseSleep(d time.Duration) {
	// The slack is per thread and the goroutine may move; setting it each
	// time costs one cheap system call.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	for {
		// EINTR leaves the remainder in ts.
		if err := syscall.Nanosleep(&ts, &ts); err != syscall.EINTR {
			return
		}
	}
}
