package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config is one permutation of the original's flags: message size (-m),
// record count (-r), clients (-l) and servers (-c), plus the total rate of a
// FixedRate trial.
type Config struct {
	Size    int     `json:"size"`
	Records int64   `json:"records,omitempty"`
	Clients int     `json:"clients"`
	Servers int     `json:"servers"`
	Rate    float64 `json:"rate,omitempty"`
}

// String names the configuration in reports and file names' order.
func (c Config) String() string {
	var b strings.Builder
	if c.Records > 0 {
		fmt.Fprintf(&b, "%s records × ", groupDigits(c.Records))
	}
	fmt.Fprintf(&b, "%d B · %d client", c.Size, c.Clients)
	if c.Clients != 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " · %d server", c.Servers)
	if c.Servers != 1 {
		b.WriteString("s")
	}
	if c.Rate > 0 {
		fmt.Fprintf(&b, " · %s/s requested", groupDigits(int64(c.Rate)))
	}
	return b.String()
}

// slug is a file-name-safe form of the configuration.
func (c Config) slug() string {
	s := fmt.Sprintf("m%d", c.Size)
	if c.Records > 0 {
		s += fmt.Sprintf("_r%d", c.Records)
	}
	s += fmt.Sprintf("_l%d_c%d", c.Clients, c.Servers)
	if c.Rate > 0 {
		s += fmt.Sprintf("_rate%d", int64(c.Rate))
	}
	return s
}

// Matrix is the comma-separated lists of the original's flags.
type Matrix struct {
	Sizes   []int
	Records []int64
	Clients []int
	Servers []int
	// Rates are total FixedRate rates; FixedRate trials run once per rate.
	Rates []float64
}

// Expand returns every permutation of m that scenario s uses, in flag order
// (sizes outermost). Scenarios that do not use a dimension see it once, so
// a round trip is not repeated per record count.
func (m Matrix) Expand(s Scenario) []Config {
	records := m.Records
	if !s.Throughput() {
		records = []int64{0}
	}
	rates := []float64{0}
	if s == FixedRate {
		rates = m.Rates
	}
	var out []Config
	for _, size := range m.Sizes {
		for _, r := range records {
			for _, l := range m.Clients {
				for _, c := range m.Servers {
					for _, rate := range rates {
						out = append(out, Config{Size: size, Records: r, Clients: l, Servers: c, Rate: rate})
					}
				}
			}
		}
	}
	return out
}

// Validate rejects permutations that cannot run.
func (m Matrix) Validate() error {
	if len(m.Sizes) == 0 || len(m.Records) == 0 || len(m.Clients) == 0 || len(m.Servers) == 0 {
		return fmt.Errorf("bench: every one of -m, -r, -l and -c needs at least one value")
	}
	for _, v := range m.Sizes {
		if v < 0 {
			return fmt.Errorf("bench: message size %d < 0", v)
		}
	}
	for _, v := range m.Records {
		if v <= 0 {
			return fmt.Errorf("bench: record count %d <= 0", v)
		}
	}
	for _, v := range append(append([]int{}, m.Clients...), m.Servers...) {
		if v <= 0 {
			return fmt.Errorf("bench: client and server counts must be > 0, got %d", v)
		}
	}
	for _, v := range m.Rates {
		if v <= 0 {
			return fmt.Errorf("bench: rate %g <= 0", v)
		}
	}
	return nil
}

// Params are the scenario settings that are not permuted.
type Params struct {
	// Window bounds requests in flight per client in RequestReply.
	Window int `json:"window"`
	// WarmupRecords run, unmeasured, before each throughput trial.
	WarmupRecords int64 `json:"warmup_records"`
	// Count and WarmupCount are RoundTrip's calls per client.
	Count       int64 `json:"count"`
	WarmupCount int64 `json:"warmup_count"`
	// Warmup, Duration and Timeout shape FixedRate.
	Warmup   time.Duration `json:"warmup_ns"`
	Duration time.Duration `json:"duration_ns"`
	Timeout  time.Duration `json:"timeout_ns"`
	// Tick is the FixedRate generator's shortest sleep (OpenLoop.Tick).
	Tick time.Duration `json:"tick_ns"`
	// TrialTimeout bounds one trial from spawning to the last exit.
	TrialTimeout time.Duration `json:"trial_timeout_ns"`
	// Host is the loopback address servers listen on.
	Host string `json:"host"`
	// Attach, if set, lists the addresses of servers already running
	// (each as its `fero-bench server` printed it): the runner starts no
	// server and every trial's clients dial these. Their CPU and memory
	// are not ours to read, so a trial reports none.
	Attach []string `json:"attach,omitempty"`
	// DataDir is where a Durable system's servers make their data
	// directories (ServeOptions.DataDir); empty is the OS's temporary
	// directory.
	DataDir string `json:"data_dir,omitempty"`
}

// Trial is one system, scenario and configuration in one run.
type Trial struct {
	Run      int      `json:"run"`
	System   string   `json:"system"`
	Scenario Scenario `json:"scenario"`
	Config   Config   `json:"config"`
}

// key groups a trial's repetitions across runs.
func (t Trial) key() trialKey { return trialKey{t.System, t.Scenario, t.Config} }

type trialKey struct {
	System   string
	Scenario Scenario
	Config   Config
}

// Trials interleaves the work: each run goes through every scenario and
// configuration, and within each, every system back to back, so slow drift
// in the machine spreads over all of them instead of landing on one.
func Trials(systems []string, scenarios []Scenario, m Matrix, runs int) []Trial {
	var out []Trial
	for run := 1; run <= runs; run++ {
		for _, s := range scenarios {
			for _, c := range m.Expand(s) {
				for _, sys := range systems {
					out = append(out, Trial{Run: run, System: sys, Scenario: s, Config: c})
				}
			}
		}
	}
	return out
}

// ParseInts parses a comma-separated list such as "10,100,1000". Digits may
// be grouped with underscores ("1_000_000") and a k/m suffix multiplies.
func ParseInts(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.ReplaceAll(strings.TrimSpace(f), "_", "")
		if f == "" {
			continue
		}
		mult := int64(1)
		switch {
		case strings.HasSuffix(f, "k"), strings.HasSuffix(f, "K"):
			mult, f = 1000, f[:len(f)-1]
		case strings.HasSuffix(f, "m"), strings.HasSuffix(f, "M"):
			mult, f = 1000000, f[:len(f)-1]
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: %q is not a count: %w", f, err)
		}
		out = append(out, v*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: empty list %q", s)
	}
	return out, nil
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
