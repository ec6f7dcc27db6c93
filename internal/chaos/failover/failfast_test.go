package failover

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

func sec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// TestAccount: the figures of a small history worked out by hand. The kill
// is at 1s; a0 is the victim's array, a1 another server's.
func TestAccount(t *testing.T) {
	ws := []Write{
		{Elem: 0, Array: "a0", Intended: 0, Done: sec(0.001)},                                                     // before the kill
		{Elem: 1, Array: "a1", Intended: sec(0.9), Done: sec(3)},                                                  // in flight at it
		{Elem: 2, Array: "a0", Intended: sec(1.1), Done: sec(2.5)},                                                // applied twice
		{Elem: 3, Array: "a0", Intended: sec(1.2), Done: sec(2.4)},                                                // a0's first after the kill
		{Elem: 4, Array: "a1", Intended: sec(1.3), Done: sec(11.3), Code: fero.CodeDeadlineExceeded, Err: "late"}, // over
		{Elem: 5, Array: "a0", Intended: sec(1.4), Done: sec(1.5), Code: fero.CodeUnavailable, Err: "not owner"},  // yet present
		{Elem: 6, Array: "a1", Intended: sec(2), Done: sec(2.01)},                                                 // lost
	}
	present := map[string][]int64{
		"a0": {0, 2, 2, 5, 3},
		"a1": {1, 99, 0}, // 99 was never written, 0 not to a1
	}
	r := Account(ws, sec(1), map[string]bool{"a0": true}, present)
	want := Report{
		Writes: 7, Window: 6, Acked: 5, Kill: sec(1), First: sec(1.4), All: sec(1.4),
		Over: 1, Lost: 1, Duplicated: 1, UnackedPresent: 1, Unknown: 2,
		ErrFirst: sec(0.5), ErrLast: sec(10.3), ErrVictim: 1,
	}
	got := *r
	got.Errors, got.Samples, got.Latency, got.VictimLatency = nil, nil, Latency{}, Latency{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Account =\n%+v\nwant\n%+v", got, want)
	}
	if r.Errors["deadline_exceeded"] != 1 || r.Errors["unavailable"] != 1 || len(r.Errors) != 2 {
		t.Errorf("errors = %v", r.Errors)
	}
	if r.Samples["unavailable"] != "not owner" {
		t.Errorf("samples = %v", r.Samples)
	}
	// Window latencies: 2.1, 1.4, 1.2, 10, 0.1, 0.01 s; the victim's 1.4, 1.2, 0.1.
	if l := r.Latency; l.N != 6 || l.P50 != sec(1.2) || l.Max != sec(10) || l.P99 != sec(10) {
		t.Errorf("latency = %+v", l)
	}
	if l := r.VictimLatency; l.N != 3 || l.P50 != sec(1.2) || l.Max != sec(1.4) {
		t.Errorf("victim's latency = %+v", l)
	}
}

// TestAccountNoFailover: a victim's array that took no write after the
// kill leaves the failover time unknown, and no write counts as over it.
func TestAccountNoFailover(t *testing.T) {
	ws := []Write{
		{Elem: 0, Array: "a0", Intended: sec(1.5), Done: sec(11.5), Code: fero.CodeDeadlineExceeded},
		{Elem: 1, Array: "a1", Intended: sec(1.5), Done: sec(1.6)},
	}
	r := Account(ws, sec(1), map[string]bool{"a0": true, "a1": true}, map[string][]int64{"a1": {1}})
	if r.All != -1 || r.Over != 0 || r.Lost != 0 {
		t.Errorf("All %v, Over %d, Lost %d; want -1, 0, 0", r.All, r.Over, r.Lost)
	}
	var b bytes.Buffer
	r.Print(&b)
	if !strings.Contains(b.String(), "all arrays never") {
		t.Errorf("report lacks the missing failover:\n%s", b.String())
	}
}

func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 500, 0.99: 990, 0.999: 999, 1: 1000, 0: 1} {
		if got := quantile(ds, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of none")
	}
}

func TestPrint(t *testing.T) {
	r := &Report{Preset: "local", Victim: "s1", Retry: true, Rate: 600, Arrays: 48, VictimArrays: 13, Writes: 10800,
		Kill: sec(3), Loaded: sec(18), First: sec(5.8), All: sec(5.85), Acked: 10799, Converged: true,
		Latency: Latency{N: 9000, P50: time.Millisecond, P99: sec(5.2), P999: sec(5.7), Max: sec(5.8)},
		Errors:  map[string]int{"unavailable": 1}, Samples: map[string]string{"unavailable": "fero: unavailable: not owner"},
		ErrFirst: sec(1.7), ErrLast: sec(1.7), ErrVictim: 1, LagP99: sec(0.02), LagMax: sec(0.09), Busy: 0.97, Load: [2]string{"5.2 2.2 2.6", "6.5 2.7 2.8"}}
	var b bytes.Buffer
	r.Print(&b)
	for _, want := range []string{
		"local, retries on (default client): victim s1 (13 of 48 arrays), 10800 writes at 600/s, kill at 3s",
		"failover: first array 5.8s, all arrays 5.85s",
		"window writes (9000): p50 1ms p99 5.2s p99.9 5.7s max 5.8s",
		"errors to the caller: unavailable 1",
		"first unavailable: fero: unavailable: not owner",
		"converged: acked 10799, lost 0, duplicated 0",
		"generator-bound", "busy 97%, load 5.2 2.2 2.6 -> 6.5 2.7 2.8",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
