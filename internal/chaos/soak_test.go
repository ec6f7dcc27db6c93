package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// soakRun is a soak's records: 100 writes a second through each server
// from 10 s to 100 s, quiet before 40 s, attacked until 70 s, taking
// quietLat and attackLat (1% of each phase's writes take 20 times as
// long), and RSS samples per phase.
func soakRun(quietLat, attackLat time.Duration, rss [3]int) soakInput {
	in := soakInput{
		Servers: []string{"n1", "n2", "n3"},
		Quiet:   10 * time.Second, Attack: 40 * time.Second, Calm: 70 * time.Second, End: 100 * time.Second,
		Rejoins: []time.Duration{time.Second, time.Second}, Attackers: 5,
	}
	i := 0
	for at := in.Quiet; at < in.End; at += 10 * time.Millisecond {
		lat := quietLat
		if at >= in.Attack && at < in.Calm {
			lat = attackLat
		}
		if i%100 == 0 {
			lat *= 20
		}
		in.Recs = append(in.Recs, ViaRecord{Server: in.Servers[i%3], Key: fmt.Sprint(i), Value: i, Invoke: at, At: at + lat, OK: true})
		i++
	}
	for _, s := range in.Servers {
		for at := in.Quiet; at < in.End; at += rssEvery {
			kb := rss[0]
			switch {
			case at >= in.Attack && at < in.Calm:
				kb = rss[1]
			case at >= in.Calm:
				kb = rss[2]
			}
			in.RSS = append(in.RSS, rssSample{At: at, Server: s, KB: kb})
		}
	}
	return in
}

func TestJudgeSoakPassesAnAttackThatChangesLittle(t *testing.T) {
	res := judgeSoak(soakRun(time.Millisecond, 1500*time.Microsecond, [3]int{60 << 10, 80 << 10, 65 << 10}))
	assert.Empty(t, res.Failures)
	assert.Contains(t, res.Report, "PASS")
	assert.Contains(t, res.Report, "p99 under attack / quiet: 1.50")
}

// Each promise of the soak fails it on its own.
func TestJudgeSoakFailsEachBrokenPromise(t *testing.T) {
	cases := map[string]struct {
		change func(*soakInput)
		want   string
	}{
		"slow under attack": {func(in *soakInput) {
			*in = soakRun(time.Millisecond, 3*time.Millisecond, [3]int{60 << 10, 80 << 10, 65 << 10})
		}, "p99 under attack"},
		"memory grows": {func(in *soakInput) {
			*in = soakRun(time.Millisecond, time.Millisecond, [3]int{60 << 10, 130 << 10, 65 << 10})
		}, "peak RSS under attack"},
		"memory kept": {func(in *soakInput) {
			*in = soakRun(time.Millisecond, time.Millisecond, [3]int{60 << 10, 100 << 10, 125 << 10})
		}, "after the attack"},
		"a write lost":    {func(in *soakInput) { in.Lost = []Anomaly{{Kind: "via-write-lost", Key: "7"}} }, "1 acked writes lost"},
		"no rejoin":       {func(in *soakInput) { in.Rejoins[1] = -1 }, "did not vote again"},
		"restart skipped": {func(in *soakInput) { in.Rejoins = in.Rejoins[:1] }, "only 1 of the 2 restarts"},
		"a crash":         {func(in *soakInput) { in.Crashes = []string{"n2"} }, "exited by themselves"},
		"nothing acked":   {func(in *soakInput) { in.Recs = nil }, "no acked write"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := soakRun(time.Millisecond, time.Millisecond, [3]int{60 << 10, 80 << 10, 65 << 10})
			c.change(&in)
			res := judgeSoak(in)
			require.NotEmpty(t, res.Failures)
			assert.Contains(t, strings.Join(res.Failures, "\n"), c.want)
			assert.NotContains(t, res.Report, "PASS")
		})
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	assert.Equal(t, time.Duration(990), quantile(d, 0.99))
	assert.Equal(t, time.Duration(500), quantile(d, 0.5))
	assert.Equal(t, time.Duration(1000), quantile(d, 1))
	assert.Equal(t, time.Duration(0), quantile(nil, 0.99))
}
