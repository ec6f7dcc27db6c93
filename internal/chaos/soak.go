package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The hostile soak (issue 42): three servers with the cluster secret
// (and, with TLS, over TLS) in network namespaces, Majority writers with
// the client token writing through every server, one quiet phase and then
// one phase with fero-hostile attacking every server from several
// namespaces (one source address each). Each phase SIGKILLs and restarts
// one server at its middle, so the phases differ only by the attack. The
// soak passes if no acked write is lost, the writes' p99 under attack is
// at most twice the quiet phase's, the server restarted under attack
// rejoins, every server's peak RSS under attack is at most twice its quiet
// peak, and 60 s after the attack every server's RSS is at most twice what
// it was just before.

// SoakConfig configures a hostile soak.
type SoakConfig struct {
	// Fero and Hostile are the fero and fero-hostile binaries.
	Fero, Hostile string
	// Out receives the servers' logs, the attackers' reports, the writes
	// (via.records.txt), the RSS samples (rss.csv) and the report
	// (soak.txt).
	Out string
	// Phase is the length of the quiet phase and of the attack (10 min).
	Phase time.Duration
	// After is how long the writers go on after the attack, for memory
	// to come back (60 s).
	After time.Duration
	// TLS runs the data plane over TLS, the attack too.
	TLS bool
	// Attackers is the number of attacking namespaces, each with its own
	// source address (5).
	Attackers int
	// Nice is the attackers' nice value (19): on one machine the
	// attackers' own CPU, which on a network is other hosts', would
	// otherwise be taken from the servers.
	Nice int
	// Idle runs the attackers under the SCHED_IDLE policy instead of a
	// nice value: they get the CPU only when nothing else wants it, and
	// a server or writer that wakes takes it from them at once. It is the
	// nearest a single machine gets to an attacker on other hosts; the
	// kernel's work on the attack's packets is still the servers' host's.
	Idle bool
	// CPUs, when set, pins the attackers to these CPUs (taskset's list,
	// "1"): on a kernel without in-kernel preemption (PREEMPT_NONE), an
	// attacker's system calls and the packet work they do hold a CPU until
	// they yield, whatever the attacker's priority; pinned, they hold only
	// their own, as an attacker on other hosts holds none of ours.
	CPUs string
	// Decoy aims the attack at a second, idle cluster of three servers
	// (namespaces d1-d3) instead of the measured one: the same attack and
	// the same code refusing it, on the same machine, but in processes the
	// writers do not use. The control run: what the attack costs the
	// writers through the machine alone.
	Decoy bool
	// AttackArgs are extra fero-hostile flags.
	AttackArgs []string
	// ServerArgs are extra `fero serve` flags (say, --pprof to profile a
	// server under attack from inside its namespace).
	ServerArgs []string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// SoakResult is a soak's outcome: the report, and each promise it broke.
type SoakResult struct {
	Report   string
	Failures []string
}

// Soak timings.
const (
	// soakWarmup lets the writers connect and every partition sync
	// before the quiet phase is measured.
	soakWarmup = 10 * time.Second
	// soakVictim is the server each phase restarts.
	soakVictim = "n3"
	// soakRejoin bounds how long the restarted server may take to vote
	// again and take writes through it.
	soakRejoin = 60 * time.Second
	// rssEvery is the RSS sampling period.
	rssEvery = 2 * time.Second
)

// rssSample is one server's resident set at a time since the start.
type rssSample struct {
	At     time.Duration
	Server string
	KB     int
}

// Soak runs the hostile soak cfg describes.
func Soak(ctx context.Context, cfg SoakConfig) (_ *SoakResult, err error) {
	if cfg.Phase <= 0 {
		cfg.Phase = 10 * time.Minute
	}
	if cfg.After <= 0 {
		cfg.After = 60 * time.Second
	}
	if cfg.Attackers <= 0 {
		cfg.Attackers = 5
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	servers := []string{"n1", "n2", "n3"}
	nodes := append(slices.Clone(servers), "c1")
	var attackers []string
	for i := range cfg.Attackers {
		attackers = append(attackers, fmt.Sprintf("x%d", i+1))
	}
	var decoys []string
	if cfg.Decoy {
		decoys = []string{"d1", "d2", "d3"}
	}
	nt, err := NewNet(ctx, append(append(nodes, attackers...), decoys...))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, nt.Close()) }()
	cl, err := StartCluster(ctx, nt, ClusterConfig{
		Fero: cfg.Fero, Resource: "soak", Servers: servers, Dir: cfg.Out,
		Logf: cfg.Logf, DataDirs: true, TLS: cfg.TLS, Args: cfg.ServerArgs,
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, cl.Close()) }()
	cfg.Logf("cluster up: %v (TLS %v)", cl.PIDs(), cfg.TLS)
	target := cl
	targets := servers
	if cfg.Decoy {
		dir := filepath.Join(cfg.Out, "decoy")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		target, err = StartCluster(ctx, nt, ClusterConfig{
			Fero: cfg.Fero, Resource: "decoy", Servers: decoys, Dir: dir,
			Logf: cfg.Logf, DataDirs: true, TLS: cfg.TLS, Args: cfg.ServerArgs,
		})
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, target.Close()) }()
		targets = decoys
		cfg.Logf("decoy cluster up: %v; the attack goes there", target.PIDs())
	}

	quiet := soakWarmup
	attack := quiet + cfg.Phase
	calm := attack + cfg.Phase
	end := calm + cfg.After
	t0 := time.Now()
	via, err := startVia(ctx, nt, cl, "c1", servers, 1, t0, end)
	if err != nil {
		return nil, err
	}
	defer func() { via.wait(); via.close() }()

	var rss []rssSample
	var rssMu sync.Mutex
	sctx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for {
			for s, pid := range cl.PIDs() {
				if kb, ok := readRSS(pid); ok {
					rssMu.Lock()
					rss = append(rss, rssSample{At: time.Since(t0), Server: s, KB: kb})
					rssMu.Unlock()
				}
			}
			select {
			case <-sctx.Done():
				return
			case <-time.After(rssEvery):
			}
		}
	})
	defer func() { stopSampling(); sampling.Wait() }()

	var rejoins []time.Duration
	restart := func(at time.Duration) error {
		if err := sleepUntil(ctx, t0.Add(at)); err != nil {
			return err
		}
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cfg.Logf("SIGKILL %s at %v", soakVictim, at)
		if err := cl.Kill(kctx, soakVictim); err != nil {
			return err
		}
		if err := cl.Restart(soakVictim); err != nil {
			return err
		}
		d, err := rejoined(ctx, cl, via, soakVictim, time.Since(t0), t0)
		if err != nil {
			cfg.Logf("%s did not rejoin: %v", soakVictim, err)
			rejoins = append(rejoins, -1)
			return nil
		}
		cfg.Logf("%s rejoined %v after its restart", soakVictim, d.Round(time.Millisecond))
		rejoins = append(rejoins, d)
		return nil
	}

	cfg.Logf("quiet phase: %v from %v", cfg.Phase, quiet)
	if err := restart(quiet + cfg.Phase/2); err != nil {
		return nil, err
	}
	if err := sleepUntil(ctx, t0.Add(attack)); err != nil {
		return nil, err
	}
	cfg.Logf("attack: %d attackers for %v", len(attackers), cfg.Phase)
	procs, err := startAttackers(ctx, nt, target, cfg, attackers, targets)
	defer func() {
		for _, p := range procs {
			if p.Process != nil {
				_ = p.Process.Kill()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := restart(attack + cfg.Phase/2); err != nil {
		return nil, err
	}
	// The attackers stop by themselves at the phase's end; give them a
	// minute to finish their last round, then kill what is left.
	waitProcs(procs, t0.Add(calm+time.Minute))
	cfg.Logf("attack over; writers go on for %v", cfg.After)
	via.wait()
	stopSampling()
	sampling.Wait()

	// Every acked write must be there: read each back once the restarted
	// server votes again.
	cl.WaitVoting(ctx, "", 2*time.Minute)
	anomalies := via.verify(ctx, servers[0])
	recs := via.records()
	rep := judgeSoak(soakInput{
		Recs: recs, RSS: rss, Servers: servers, Quiet: quiet, Attack: attack, Calm: calm, End: end,
		Rejoins: rejoins, Lost: anomalies, Crashes: cl.Crashes(), TLS: cfg.TLS, Attackers: len(attackers), Idle: cfg.Idle, Decoy: cfg.Decoy, CPUs: cfg.CPUs,
	})
	rep.Report += attackSummary(cfg.Out, attackers)
	var csv strings.Builder
	csv.WriteString("seconds,server,rss_kb\n")
	for _, s := range rss {
		fmt.Fprintf(&csv, "%.1f,%s,%d\n", s.At.Seconds(), s.Server, s.KB)
	}
	err = errors.Join(
		writeVia(cfg.Out, rep.Report, recs),
		os.WriteFile(filepath.Join(cfg.Out, "rss.csv"), []byte(csv.String()), 0o644),
		os.WriteFile(filepath.Join(cfg.Out, "soak.txt"), []byte(rep.Report), 0o644))
	return rep, err
}

// rejoined waits until node votes again and a write through it was
// acked after since (both measured from t0), and returns how long that
// took from since.
func rejoined(ctx context.Context, cl *Cluster, via *viaRun, node string, since time.Duration, t0 time.Time) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, soakRejoin)
	defer cancel()
	voting := false
	for {
		if !voting {
			if st, _, err := cl.Status(ctx, node); err == nil && st.Voting {
				voting = true
			}
		}
		if voting {
			for _, r := range via.records() {
				if r.Server == node && r.OK && r.Invoke > since {
					return time.Since(t0) - since, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("within %v: voting %v, no write through it acked", soakRejoin, voting)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startAttackers starts fero-hostile in each attacker's namespace against
// every server, for the phase.
func startAttackers(ctx context.Context, nt *Net, cl *Cluster, cfg SoakConfig, attackers, servers []string) ([]*exec.Cmd, error) {
	var data, gossip []string
	for _, s := range servers {
		data = append(data, cl.Addr(s))
		gossip = append(gossip, cl.Gossip(s))
	}
	sched := []string{"nice", "-n", strconv.Itoa(cmp.Or(cfg.Nice, 19))}
	if cfg.Idle {
		sched = []string{"chrt", "--idle", "0"}
	}
	if cfg.CPUs != "" {
		sched = append([]string{"taskset", "-c", cfg.CPUs}, sched...)
	}
	var procs []*exec.Cmd
	for _, x := range attackers {
		args := append(append([]string{"netns", "exec", nt.NS(x)}, sched...), cfg.Hostile,
			"--data", strings.Join(data, ","), "--gossip", strings.Join(gossip, ","),
			"--duration", cfg.Phase.String(), "--claim", servers[0],
			// Under the servers' pace of new connections per address
			// (--new-conn-rate, 50 a second), so the silent ones reach
			// the unproved caps; the storm goes over it.
			"--silent-pace", "40")
		if cfg.TLS {
			args = append(args, "--tls")
		}
		args = append(args, cfg.AttackArgs...)
		out, err := os.Create(filepath.Join(cfg.Out, "attacker-"+x+".txt"))
		if err != nil {
			return procs, err
		}
		cmd := exec.CommandContext(ctx, "ip", args...)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		out.Close()
		if err != nil {
			return procs, fmt.Errorf("chaos: start fero-hostile in %s: %w", x, err)
		}
		cfg.Logf("%s: fero-hostile pid %d from %s", x, cmd.Process.Pid, nt.IP(x))
		procs = append(procs, cmd)
	}
	return procs, nil
}

// waitProcs waits for every process until deadline, then kills the rest.
func waitProcs(procs []*exec.Cmd, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		for _, p := range procs {
			_ = p.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		for _, p := range procs {
			_ = p.Process.Kill()
		}
		<-done
	}
}

// readRSS is a process's VmRSS in kB.
func readRSS(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.Atoi(f[0])
				return kb, err == nil
			}
		}
	}
	return 0, false
}

// attackSummary is, per attacker, its rounds and, per target, its last
// round that the attack's end did not cut short (or the only one).
func attackSummary(out string, attackers []string) string {
	var b strings.Builder
	b.WriteString("attackers (per target, the last whole round):\n")
	for _, x := range attackers {
		data, err := os.ReadFile(filepath.Join(out, "attacker-"+x+".txt"))
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", x, err)
			continue
		}
		rounds := map[string][]string{}
		var order []string
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			target, _, ok := strings.Cut(l, " round ")
			if !ok {
				continue
			}
			if _, seen := rounds[target]; !seen {
				order = append(order, target)
			}
			rounds[target] = append(rounds[target], l)
		}
		for _, t := range order {
			rs := rounds[t]
			last := rs[len(rs)-1]
			if len(rs) > 1 {
				last = rs[len(rs)-2]
			}
			fmt.Fprintf(&b, "  %s → %d rounds; %s\n", x, len(rs), last)
		}
	}
	return b.String()
}

// soakInput is what judgeSoak judges.
type soakInput struct {
	Recs                     []ViaRecord
	RSS                      []rssSample
	Servers                  []string
	Quiet, Attack, Calm, End time.Duration
	Rejoins                  []time.Duration
	Lost                     []Anomaly
	Crashes                  []string
	TLS                      bool
	Attackers                int
	Idle, Decoy              bool
	CPUs                     string
}

// latencies is a phase's write latencies (every write invoked in it,
// a failed one at the time its caller was answered) and counts.
type latencies struct {
	all           []time.Duration
	acked, failed int
}

func phaseLatencies(recs []ViaRecord, from, to time.Duration) latencies {
	var l latencies
	for _, r := range recs {
		if r.Invoke < from || r.Invoke >= to {
			continue
		}
		l.all = append(l.all, r.At-r.Invoke)
		if r.OK {
			l.acked++
		} else {
			l.failed++
		}
	}
	slices.Sort(l.all)
	return l
}

// quantile is the q-quantile of sorted d (nearest rank), 0 if empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// judgeSoak writes the report and lists what the soak broke.
func judgeSoak(in soakInput) *SoakResult {
	res := &SoakResult{}
	var b strings.Builder
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		res.Failures = append(res.Failures, msg)
		fmt.Fprintf(&b, "FAIL: %s\n", msg)
	}
	mode := "cluster secret and client token"
	if in.TLS {
		mode += ", over TLS"
	}
	fmt.Fprintf(&b, "hostile soak: 3 servers (%s); quiet %v to %v, attack from %d source addresses %v to %v, calm to %v\n",
		mode, in.Quiet, in.Attack, in.Attackers, in.Attack, in.Calm, in.End)
	if in.Idle {
		fmt.Fprintf(&b, "attackers under SCHED_IDLE (the CPU only when nothing else wants it)\n")
	}
	if in.CPUs != "" {
		fmt.Fprintf(&b, "attackers pinned to CPUs %s\n", in.CPUs)
	}
	if in.Decoy {
		fmt.Fprintf(&b, "CONTROL: the attack aimed at an idle decoy cluster, not at the servers written through\n")
	}

	q := phaseLatencies(in.Recs, in.Quiet, in.Attack)
	a := phaseLatencies(in.Recs, in.Attack, in.Calm)
	fmt.Fprintf(&b, "Majority writes through every server (%v deadline; a failed write counts at its answer):\n", viaTimeout)
	for _, p := range []struct {
		name string
		l    latencies
	}{{"quiet", q}, {"attack", a}} {
		fmt.Fprintf(&b, "  %-6s %6d acked, %4d failed; p50 %v, p90 %v, p99 %v, p99.9 %v, max %v\n", p.name, p.l.acked, p.l.failed,
			quantile(p.l.all, 0.5).Round(10*time.Microsecond), quantile(p.l.all, 0.9).Round(10*time.Microsecond),
			quantile(p.l.all, 0.99).Round(10*time.Microsecond), quantile(p.l.all, 0.999).Round(10*time.Microsecond),
			quantile(p.l.all, 1).Round(10*time.Microsecond))
	}
	qp, ap := quantile(q.all, 0.99), quantile(a.all, 0.99)
	switch {
	case q.acked == 0 || a.acked == 0:
		fail("no acked write in a phase (quiet %d, attack %d)", q.acked, a.acked)
	case ap > 2*qp:
		fail("p99 under attack %v is more than twice the quiet phase's %v", ap, qp)
	default:
		fmt.Fprintf(&b, "  p99 under attack / quiet: %.2f (at most 2)\n", float64(ap)/float64(qp))
	}
	acked := 0
	for _, r := range in.Recs {
		if r.OK {
			acked++
		}
	}
	fmt.Fprintf(&b, "acked writes read back after the end: %d, lost or unreadable: %d\n", acked, len(in.Lost))
	for i, an := range in.Lost {
		if i == 10 {
			fmt.Fprintf(&b, "  … %d more\n", len(in.Lost)-10)
			break
		}
		fmt.Fprintf(&b, "  %s\n", an)
	}
	if len(in.Lost) > 0 {
		fail("%d acked writes lost or unreadable", len(in.Lost))
	}
	for i, d := range in.Rejoins {
		phase := []string{"quiet", "attack"}[min(i, 1)]
		if d < 0 {
			fail("%s, restarted in the %s phase, did not vote again and take a write within %v", soakVictim, phase, soakRejoin)
			continue
		}
		fmt.Fprintf(&b, "%s SIGKILLed and restarted in the %s phase: voting and writing through it again after %v\n", soakVictim, phase, d.Round(time.Millisecond))
	}
	if len(in.Rejoins) < 2 {
		fail("only %d of the 2 restarts ran", len(in.Rejoins))
	}
	if len(in.Crashes) > 0 {
		fail("servers exited by themselves: %v", in.Crashes)
	}

	fmt.Fprintf(&b, "RSS per server (MB): quiet peak, attack peak (ratio), just before the attack, %v after it (ratio):\n", in.End-in.Calm)
	for _, s := range in.Servers {
		var qPeak, aPeak, before, after int
		for _, r := range in.RSS {
			if r.Server != s {
				continue
			}
			switch {
			case r.At >= in.Quiet && r.At < in.Attack:
				qPeak = max(qPeak, r.KB)
				before = r.KB
			case r.At >= in.Attack && r.At < in.Calm:
				aPeak = max(aPeak, r.KB)
			case r.At >= in.Calm:
				after = r.KB
			}
		}
		if qPeak == 0 || aPeak == 0 || after == 0 {
			fail("%s: RSS not sampled in every phase (quiet %d kB, attack %d kB, after %d kB)", s, qPeak, aPeak, after)
			continue
		}
		mb := func(kb int) float64 { return float64(kb) / 1024 }
		fmt.Fprintf(&b, "  %s: %.0f, %.0f (%.2f), %.0f, %.0f (%.2f)\n", s, mb(qPeak), mb(aPeak), float64(aPeak)/float64(qPeak),
			mb(before), mb(after), float64(after)/float64(before))
		if aPeak > 2*qPeak {
			fail("%s: peak RSS under attack %.0f MB is more than twice its quiet peak %.0f MB", s, mb(aPeak), mb(qPeak))
		}
		if after > 2*before {
			fail("%s: RSS %v after the attack %.0f MB is more than twice its %.0f MB before it", s, in.End-in.Calm, mb(after), mb(before))
		}
	}
	if len(res.Failures) == 0 {
		b.WriteString("PASS\n")
	}
	res.Report = b.String()
	return res
}
