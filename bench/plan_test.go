package bench

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExpandEveryPermutation(t *testing.T) {
	m := Matrix{Sizes: []int{10, 100, 1000}, Records: []int64{100_000, 1_000_000}, Clients: []int{1}, Servers: []int{1}}
	got := m.Expand(OneWay)
	// The original's example: -m 10,100,1000 -r 100000,1000000 runs 6 tests.
	require.Len(t, got, 6)
	assert.Equal(t, Config{Size: 10, Records: 100_000, Clients: 1, Servers: 1}, got[0])
	assert.Equal(t, Config{Size: 10, Records: 1_000_000, Clients: 1, Servers: 1}, got[1])
	assert.Equal(t, Config{Size: 1000, Records: 1_000_000, Clients: 1, Servers: 1}, got[5])

	m.Clients, m.Servers = []int{1, 2}, []int{1, 3}
	assert.Len(t, m.Expand(RequestReply), 24)
	// A round trip does not depend on -r, so it is not repeated per count.
	rt := m.Expand(RoundTrip)
	assert.Len(t, rt, 12)
	assert.Zero(t, rt[0].Records)
	m.Rates = []float64{1000, 5000}
	assert.Len(t, m.Expand(FixedRate), 24)
	assert.Equal(t, 5000.0, m.Expand(FixedRate)[1].Rate)
}

func TestTrialsInterleaveRunsAndSystems(t *testing.T) {
	m := Matrix{Sizes: []int{10, 100}, Records: []int64{5}, Clients: []int{1}, Servers: []int{1}}
	ts := Trials([]string{"echo", "x"}, []Scenario{OneWay}, m, 2)
	require.Len(t, ts, 8)
	var got []string
	for _, tr := range ts {
		got = append(got, tr.System+"/"+tr.Config.slug()+"/"+string(rune('0'+tr.Run)))
	}
	assert.Equal(t, []string{
		"echo/m10_r5_l1_c1/1", "x/m10_r5_l1_c1/1", "echo/m100_r5_l1_c1/1", "x/m100_r5_l1_c1/1",
		"echo/m10_r5_l1_c1/2", "x/m10_r5_l1_c1/2", "echo/m100_r5_l1_c1/2", "x/m100_r5_l1_c1/2",
	}, got)
}

// TestSessionSkipLeavesOutOnlyWhatASystemCannotRun: Skip removes the
// trials of one system, scenario and server count; the others keep theirs.
func TestSessionSkipLeavesOutOnlyWhatASystemCannotRun(t *testing.T) {
	m := Matrix{Sizes: []int{100}, Records: []int64{5}, Clients: []int{1}, Servers: []int{1, 3}}
	s := &Session{Systems: []string{"echo", "old"}, Scenarios: []Scenario{OneWay, RoundTrip}, Runs: 1,
		Skip: func(system string, sc Scenario, servers int) error {
			if system == "old" && servers > 1 {
				return errors.New("one server only")
			}
			return nil
		}}
	var got []string
	for _, tr := range s.trials(m) {
		got = append(got, fmt.Sprintf("%s/%s/c%d", tr.System, tr.Scenario, tr.Config.Servers))
	}
	assert.Equal(t, []string{
		"echo/oneway/c1", "old/oneway/c1", "echo/oneway/c3",
		"echo/roundtrip/c1", "old/roundtrip/c1", "echo/roundtrip/c3",
	}, got)
	s.Skip = nil
	assert.Len(t, s.trials(m), 8)
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts("10, 100,1_000,2k,1M")
	require.NoError(t, err)
	assert.Equal(t, []int64{10, 100, 1000, 2000, 1_000_000}, got)
	_, err = ParseInts("ten")
	assert.Error(t, err)
	_, err = ParseInts("")
	assert.Error(t, err)
}

func TestMatrixValidate(t *testing.T) {
	ok := Matrix{Sizes: []int{0}, Records: []int64{1}, Clients: []int{1}, Servers: []int{1}}
	assert.NoError(t, ok.Validate())
	bad := ok
	bad.Clients = []int{0}
	assert.Error(t, bad.Validate())
	bad = ok
	bad.Records = nil
	assert.Error(t, bad.Validate())
}

func TestClientSpecSplitsRecordsAndRate(t *testing.T) {
	tr := Trial{System: "echo", Scenario: OneWay, Config: Config{Size: 8, Records: 10, Clients: 3, Servers: 1}}
	var total int64
	for i := 0; i < 3; i++ {
		total += ClientSpecFor(tr, Params{}, []string{"a"}, i, 0).Records
	}
	assert.EqualValues(t, 10, total)
	tr.Scenario, tr.Config.Rate = FixedRate, 900
	assert.Equal(t, 300.0, ClientSpecFor(tr, Params{}, nil, 0, 0).Rate)
}

func TestSweepRates(t *testing.T) {
	assert.Equal(t, []float64{25000, 50000, 90000}, SweepRates(100_000, []float64{0.25, 0.5, 0.9}))
}
