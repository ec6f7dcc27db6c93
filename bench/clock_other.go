//go:build !linux

package bench

import "time"

// preciseSleep falls back to the runtime's timer where no finer sleep is
// wired up; the generator's lag histogram shows what that costs.
func preciseSleep(d time.Duration) { time.Sleep(d) }
