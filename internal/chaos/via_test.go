package chaos

import (
	"strings"
	"testing"
	"time"
)

// viaRecs makes the acked writes of one server: rate(t) writes in each
// 100 ms from 0 to end.
func viaRecs(server string, end time.Duration, rate func(at time.Duration) int) []ViaRecord {
	var out []ViaRecord
	for at := time.Duration(0); at < end; at += 100 * time.Millisecond {
		for i := range rate(at) {
			out = append(out, ViaRecord{Server: server, At: at + time.Duration(i)*time.Millisecond, OK: true})
		}
	}
	return out
}

func TestCheckVia(t *testing.T) {
	const start, stop = 5 * time.Second, 65 * time.Second
	down := func(from, to time.Duration) func(time.Duration) int {
		return func(at time.Duration) int {
			if at >= from && at < to {
				return 0
			}
			return 4 // 40/s
		}
	}
	var recs []ViaRecord
	recs = append(recs, viaRecs("n1", 70*time.Second, down(start, stop))...)                                // never back
	recs = append(recs, viaRecs("n2", 70*time.Second, down(start, start+3*time.Second))...)                 // back after 3 s
	recs = append(recs, viaRecs("n3", 70*time.Second, down(start, start+7*time.Second))...)                 // back after 7 s
	recs = append(recs, viaRecs("n4", 70*time.Second, down(start+30*time.Second, start+34*time.Second))...) // 4 s gone midway
	recs = append(recs, viaRecs("n5", 70*time.Second, down(start+30*time.Second, start+32*time.Second))...) // 2 s gone midway: a load spike
	recs = append(recs, ViaRecord{Server: "n2", At: 6 * time.Second, Err: "deadline"})
	reps, anomalies := CheckVia(recs, []string{"n1", "n2", "n3", "n4", "n5"}, start, stop, OneWayBound)
	var bad []string
	for _, a := range anomalies {
		bad = append(bad, a.Message)
	}
	got := strings.Join(bad, "\n")
	for _, want := range []string{"through n1 held", "through n3 held", "through n4 held"} {
		if !strings.Contains(got, want) {
			t.Errorf("anomalies lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "through n2") || strings.Contains(got, "through n5") || len(anomalies) != 3 {
		t.Errorf("anomalies:\n%s\nwant n1, n3 and n4 only", got)
	}
	if r := reps[1]; r.Before != 40 || r.Recovery != time.Second || r.Failed != 1 || r.Tens[0] != 280 || len(r.Tens) != 6 {
		t.Errorf("n2's report = %+v, want 40/s before, every 5 s from 1s on at half (3 s of 5 at 40/s), 1 failed, 280 in the first 10 s", r)
	}
	if r := reps[0]; r.Recovery != -1 {
		t.Errorf("n1's recovery = %v, want never (-1)", r.Recovery)
	}
}

// TestCheckUpgradeVia: failed writes within a server's upgrade (from its
// SIGTERM, less a deadline, to UpgradeWindow after its restart) pass;
// one outside every upgrade is an anomaly.
func TestCheckUpgradeVia(t *testing.T) {
	ups := []Fault{
		{Kind: KindLeave, Node: "n1", Start: 5 * time.Second, Stop: 9 * time.Second},
		{Kind: KindLeave, Node: "n2", Start: 25 * time.Second, Stop: 29 * time.Second},
	}
	recs := []ViaRecord{
		{Server: "n1", Key: "a", Invoke: 2 * time.Second, OK: true},
		{Server: "n1", Key: "b", Invoke: 4500 * time.Millisecond, Err: "deadline"}, // just before the SIGTERM
		{Server: "n1", Key: "c", Invoke: 18 * time.Second, Err: "unavailable"},     // within the window
		{Server: "n2", Key: "d", Invoke: 26 * time.Second, Err: "connection refused"},
		{Server: "n3", Key: "e", Invoke: 21 * time.Second, Err: "no quorum"}, // between the upgrades
	}
	report, anomalies := CheckUpgradeVia(recs, []string{"n1", "n2", "n3"}, ups)
	if len(anomalies) != 1 || anomalies[0].Key != "e" {
		t.Fatalf("anomalies %v, want the write of e alone\n%s", anomalies, report)
	}
	for _, want := range []string{"n1 upgraded: down 5s to 9s, window to 19s; failed through n1 2 n2 0 n3 0", "n2 upgraded: down 25s to 29s, window to 39s; failed through n1 0 n2 1 n3 0", "failed outside every upgrade: 1"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}
