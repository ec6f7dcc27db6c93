package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Runner runs trials as separate processes: it starts every server, then
// every client, starts the clients together, collects their results and
// stops everything. Exe is re-executed with the child subcommands.
type Runner struct {
	// Exe and Args start a child: Exe Args... <serve|client> --spec JSON.
	Exe  string
	Args []string
	// Env, if not nil, replaces the children's environment.
	Env []string
	// OnProgress, if set, is called from the runner's goroutine with the
	// trial's progress.
	OnProgress func(t Trial, done, total int64, elapsed time.Duration)
	// ProgressEvery is how often clients report progress.
	ProgressEvery time.Duration
	// Systems, if set, is the registry the children look systems up in.
	// The runner takes from it a system's policy (Durable), and asks a
	// system that counts fsyncs (FsyncCounter) for its servers' counts
	// around each measured window.
	Systems Registry
}

// TrialResult is one trial's merged measurements.
type TrialResult struct {
	Trial
	// Milestones are the latest over the clients, all timed from the
	// common start.
	Milestones []Milestone        `json:"milestones,omitempty"`
	Records    int64              `json:"records"`
	Sent       int64              `json:"sent"`
	Bytes      int64              `json:"bytes"`
	Errors     int64              `json:"errors"`
	Timeouts   int64              `json:"timeouts,omitempty"`
	Window     time.Duration      `json:"window_ns"`
	Interval   time.Duration      `json:"interval_ns,omitempty"`
	Tick       time.Duration      `json:"tick_ns,omitempty"`
	Lagged     int64              `json:"lagged,omitempty"`
	Clamped    int64              `json:"clamped,omitempty"`
	Summaries  map[string]Summary `json:"summaries,omitempty"`
	Histograms map[string]string  `json:"histograms,omitempty"`
	// RequestedRate and AchievedRate are FixedRate's sends per second.
	RequestedRate float64 `json:"requested_rate,omitempty"`
	AchievedRate  float64 `json:"achieved_rate,omitempty"`
	// GeneratorBound flags a FixedRate trial whose generator lag p99 was
	// over what one send interval, one tick and the sleeps' lateness at p99
	// explain: the load generator, not the system, was the bottleneck, so
	// the figures understate what was asked for.
	GeneratorBound bool     `json:"generator_bound,omitempty"`
	ClientCPU      CPUTimes `json:"client_cpu"`
	ServerCPU      CPUTimes `json:"server_cpu"`
	// Stable is how long the servers took to start, from the first's spawn
	// until the last reported ready (a fero server once its map holds every
	// server started before it). Connected is how long the clients took,
	// from the first's spawn until the last had dialed: connected, and for
	// fero routing by a map of every server with each owner taking writes.
	// Both precede the trial and are not part of its figures.
	Stable    time.Duration `json:"stable_ns"`
	Connected time.Duration `json:"connected_ns"`
	// Processes has each process's own CPU in the measured window and
	// peak RSS: the servers, then the clients (ClientCPU, ServerCPU and
	// the peaks above are their sums and maxima).
	Processes []ProcessUsage `json:"processes,omitempty"`
	// Attached: the trial ran against servers it did not start
	// (Params.Attach); ServerCPU, ServerMaxRSS and Stable are not known.
	Attached bool `json:"attached,omitempty"`
	// Peak RSS is the largest over the processes of each kind.
	ClientMaxRSS int64    `json:"client_max_rss_bytes"`
	ServerMaxRSS int64    `json:"server_max_rss_bytes"`
	Machine      Busyness `json:"machine"`
	GOMAXPROCS   int      `json:"client_gomaxprocs"`
	// Durability is when the system's servers fsync, as it says (Durable);
	// empty for a system that keeps nothing on disk.
	Durability string `json:"durability,omitempty"`
	// Fsyncs is how many fsyncs the servers made, all together, from just
	// before the measured window to just after it; nil where the system
	// does not count them (FsyncCounter).
	Fsyncs *uint64 `json:"fsyncs,omitempty"`

	hists map[string]*Recorder
}

// ProcessUsage is one process's share of a trial's costs.
type ProcessUsage struct {
	Name   string   `json:"name"` // "server 0", "client 1"
	CPU    CPUTimes `json:"cpu"`
	MaxRSS int64    `json:"max_rss_bytes"`
}

// Rate is records per second to milestone m, or 0.
func (r *TrialResult) Rate(m string) float64 {
	for _, ms := range r.Milestones {
		if ms.Name == m && ms.Nanos > 0 {
			return float64(r.Records) / ms.Nanos.Seconds()
		}
	}
	return 0
}

// Hist returns a merged histogram by name, or nil.
func (r *TrialResult) Hist(name string) *Recorder { return r.hists[name] }

// ClientSpecFor builds client i's share of trial t.
func ClientSpecFor(t Trial, p Params, servers []string, i int, progressEvery time.Duration) ClientSpec {
	c := t.Config
	spec := ClientSpec{
		System:        t.System,
		Scenario:      t.Scenario,
		Dial:          DialOptions{Servers: servers, Index: i},
		Size:          c.Size,
		Window:        p.Window,
		Count:         p.Count,
		WarmupCount:   p.WarmupCount,
		Warmup:        p.Warmup,
		Duration:      p.Duration,
		Timeout:       p.Timeout,
		Tick:          p.Tick,
		ProgressEvery: progressEvery,
	}
	if t.Scenario.Throughput() {
		// -r is the total; the first clients take the remainder.
		spec.Records = c.Records / int64(c.Clients)
		if int64(i) < c.Records%int64(c.Clients) {
			spec.Records++
		}
		spec.WarmupRecords = p.WarmupRecords
	}
	if t.Scenario == FixedRate {
		spec.Rate = c.Rate / float64(c.Clients)
	}
	return spec
}

// Run runs one trial.
func (r *Runner) Run(ctx context.Context, t Trial, p Params) (res TrialResult, err error) {
	res.Trial = t
	var counter FsyncCounter
	if sys, ok := r.Systems[t.System]; ok {
		if d, ok := sys.(Durable); ok {
			res.Durability = d.Durability()
		}
		if c, ok := sys.(FsyncCounter); ok && res.Durability != "" {
			counter = c
		}
	}
	if p.TrialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.TrialTimeout)
		defer cancel()
	}
	var all []*child
	defer func() {
		// On failure nothing is left running.
		for _, c := range all {
			c.kill()
		}
	}()

	serversStart := time.Now()
	servers := make([]*child, 0, t.Config.Servers)
	addrs := make([]string, 0, t.Config.Servers)
	if len(p.Attach) > 0 {
		if len(p.Attach) != t.Config.Servers {
			return res, fmt.Errorf("bench: %d servers attached, the trial wants %d", len(p.Attach), t.Config.Servers)
		}
		addrs = append(addrs, p.Attach...)
		res.Attached = true
	}
	for i := 0; i < t.Config.Servers && !res.Attached; i++ {
		spec := ServeSpec{System: t.System, Serve: ServeOptions{
			Addr: net.JoinHostPort(p.Host, "0"), Index: i, Peers: append([]string(nil), addrs...), DataDir: p.DataDir,
		}}
		c, err := r.spawn(ctx, fmt.Sprintf("server %d", i), ServeCommand, spec)
		if err != nil {
			return res, err
		}
		all = append(all, c)
		servers = append(servers, c)
		addr, err := c.next(ctx)
		if err != nil {
			return res, fmt.Errorf("%s did not report its address: %w", c.name, err)
		}
		addrs = append(addrs, strings.TrimSpace(addr))
	}
	if !res.Attached {
		res.Stable = time.Since(serversStart)
	}

	clientsStart := time.Now()

	clients := make([]*child, 0, t.Config.Clients)
	for i := 0; i < t.Config.Clients; i++ {
		spec := ClientSpecFor(t, p, addrs, i, r.ProgressEvery)
		c, err := r.spawn(ctx, fmt.Sprintf("client %d", i), ClientCommand, spec)
		if err != nil {
			return res, err
		}
		all = append(all, c)
		clients = append(clients, c)
	}
	for _, c := range clients {
		var m ClientMessage
		if err := c.nextJSON(ctx, &m); err != nil {
			return res, fmt.Errorf("%s: %w", c.name, err)
		}
		if !m.Ready {
			return res, fmt.Errorf("%s: %s", c.name, orUnexpected(m))
		}
		res.Connected = max(res.Connected, time.Unix(0, m.Connected).Sub(clientsStart))
	}

	// The trial begins, and with it the measured window of every scenario
	// but FixedRate (the others warm up before they report ready). The
	// fsyncs are asked first, so that answering is not the servers' CPU.
	fsyncsBefore, err := fsyncsOf(ctx, counter, addrs)
	if err != nil {
		return res, err
	}
	serverBefore, err := usageOf(ctx, servers)
	if err != nil {
		return res, err
	}
	statBefore, haveStat := ReadProcStat()
	// Far enough ahead for every client to read the line first.
	start := time.Now().Add(20*time.Millisecond + time.Duration(len(clients))*time.Millisecond)
	for _, c := range clients {
		if err := c.send(cmdGo + " " + strconv.FormatInt(start.UnixNano(), 10)); err != nil {
			return res, err
		}
	}
	// A fixed-rate warm-up runs inside the clients' schedule, which starts
	// at start: the measured window, and what it counts, begins after it.
	measured := make(chan error, 1)
	mctx, stopMeasure := context.WithCancel(ctx)
	defer stopMeasure()
	if t.Scenario == FixedRate && p.Warmup > 0 {
		go func() {
			timer := time.NewTimer(time.Until(start.Add(p.Warmup)))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-mctx.Done():
				measured <- mctx.Err()
				return
			}
			f, err := fsyncsOf(mctx, counter, addrs)
			var u []Usage
			if err == nil {
				u, err = usageOf(mctx, servers)
			}
			if err == nil {
				fsyncsBefore, serverBefore = f, u
				statBefore, haveStat = ReadProcStat()
			}
			measured <- err
		}()
	} else {
		measured <- nil
	}
	results, err := r.collect(ctx, t, p, clients, start)
	if err != nil {
		stopMeasure() // the trial failed: do not wait out the warm-up
	}
	if merr := <-measured; err == nil && merr != nil {
		err = fmt.Errorf("usage or fsyncs at the end of the warm-up: %w", merr)
	}
	if err != nil {
		return res, err
	}
	statAfter, haveStat2 := ReadProcStat()
	serverAfter, err := usageOf(ctx, servers)
	if err != nil {
		return res, err
	}
	if counter != nil {
		fsyncsAfter, err := fsyncsOf(ctx, counter, addrs)
		if err != nil {
			return res, err
		}
		n, err := fsyncsBetween(fsyncsBefore, fsyncsAfter)
		if err != nil {
			return res, err
		}
		res.Fsyncs = &n
	}
	if haveStat && haveStat2 {
		res.Machine = BusynessBetween(statBefore, statAfter)
	}
	for i, s := range servers {
		cpu := serverAfter[i].CPU.Sub(serverBefore[i].CPU)
		res.ServerCPU.User += cpu.User
		res.ServerCPU.Sys += cpu.Sys
		res.ServerCPU.Waits += cpu.Waits
		res.Processes = append(res.Processes, ProcessUsage{Name: s.name, CPU: cpu})
	}
	for i, c := range clients {
		res.Processes = append(res.Processes, ProcessUsage{Name: c.name, CPU: results[i].CPU})
	}

	// Clients exit after their result; servers once stdin closes.
	for k, c := range all {
		u, err := c.stop(ctx)
		if err != nil {
			return res, err
		}
		// A process's own peak as it read it (SelfUsage: VmHWM) at the end
		// of the window; the exit status's ru_maxrss only where it did not
		// say, since that can be the harness's peak (see SelfUsage).
		rss := u.MaxRSS
		switch {
		case k < len(servers) && serverAfter[k].ProgramMaxRSS > 0:
			// A server that runs another program (a redis-server): that
			// program's peak, read at the end of the window, not the
			// wrapper's.
			rss = serverAfter[k].ProgramMaxRSS
		case k < len(servers) && serverAfter[k].MaxRSS > 0:
			rss = serverAfter[k].MaxRSS
		case k >= len(servers) && results[k-len(servers)].MaxRSS > 0:
			rss = results[k-len(servers)].MaxRSS
		}
		res.Processes[k].MaxRSS = rss // all and Processes list servers, then clients
		if k < len(servers) {
			res.ServerMaxRSS = max(res.ServerMaxRSS, rss)
		} else {
			res.ClientMaxRSS = max(res.ClientMaxRSS, rss)
		}
	}
	all = nil
	if err := res.merge(results); err != nil {
		return res, err
	}
	return res, nil
}

// collect waits for every client's result, forwarding progress.
func (r *Runner) collect(ctx context.Context, t Trial, p Params, clients []*child, start time.Time) ([]ClientResult, error) {
	type event struct {
		i   int
		msg ClientMessage
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	events := make(chan event)
	var wg sync.WaitGroup
	// Readers stop on cancel; wait for them so none outlives the trial.
	defer func() { cancel(); wg.Wait() }()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var m ClientMessage
				err := c.nextJSON(ctx, &m)
				select {
				case events <- event{i, m, err}:
				case <-ctx.Done():
					return
				}
				if err != nil || m.Result != nil || m.Err != "" {
					return
				}
			}
		}()
	}
	total := expectedOps(t, p)
	done := make([]int64, len(clients))
	results := make([]ClientResult, len(clients))
	for left := len(clients); left > 0; {
		e := <-events
		c := clients[e.i]
		switch {
		case e.err != nil:
			return nil, fmt.Errorf("%s: %w", c.name, e.err)
		case e.msg.Err != "":
			return nil, fmt.Errorf("%s: %s", c.name, e.msg.Err)
		case e.msg.Result != nil:
			results[e.i] = *e.msg.Result
			left--
		default:
			done[e.i] = e.msg.Progress
			if r.OnProgress != nil {
				var sum int64
				for _, d := range done {
					sum += d
				}
				r.OnProgress(t, sum, total, time.Since(start))
			}
		}
	}
	return results, nil
}

// expectedOps is the progress total of a trial, in the unit clients report.
func expectedOps(t Trial, p Params) int64 {
	switch t.Scenario {
	case OneWay, RequestReply:
		return t.Config.Records
	case RoundTrip:
		return p.Count * int64(t.Config.Clients)
	case FixedRate:
		return int64(t.Config.Rate * (p.Warmup + p.Duration).Seconds())
	}
	return 0
}

// merge folds the clients' results into res.
func (res *TrialResult) merge(results []ClientResult) error {
	res.hists = map[string]*Recorder{}
	var latest = map[string]time.Duration{}
	var order []string
	for _, cr := range results {
		for _, m := range cr.Milestones {
			if _, ok := latest[m.Name]; !ok {
				order = append(order, m.Name)
			}
			latest[m.Name] = max(latest[m.Name], m.Nanos)
		}
		res.Records += cr.Records
		res.Sent += cr.Sent
		res.Bytes += cr.Bytes
		res.Errors += cr.Errors
		res.Timeouts += cr.Timeouts
		res.Lagged += cr.Lagged
		res.Clamped += cr.Clamped
		res.Window = max(res.Window, cr.Window)
		res.Interval = cr.Interval
		res.Tick = cr.Tick
		res.ClientCPU.User += cr.CPU.User
		res.ClientCPU.Sys += cr.CPU.Sys
		res.ClientCPU.Waits += cr.CPU.Waits
		res.GOMAXPROCS = cr.GOMAXPROCS
		for name, enc := range cr.Histograms {
			h, err := DecodeRecorder(enc)
			if err != nil {
				return fmt.Errorf("client %d histogram %s: %w", cr.Index, name, err)
			}
			if res.hists[name] == nil {
				res.hists[name] = NewRecorder()
			}
			res.hists[name].Merge(h)
		}
	}
	for _, n := range order {
		res.Milestones = append(res.Milestones, Milestone{n, latest[n]})
	}
	res.Summaries = map[string]Summary{}
	res.Histograms = map[string]string{}
	for name, h := range res.hists {
		res.Summaries[name] = h.Summarize()
		enc, err := h.Encode()
		if err != nil {
			return err
		}
		res.Histograms[name] = enc
	}
	if res.Scenario == FixedRate {
		res.RequestedRate = res.Config.Rate
		if res.Window > 0 {
			res.AchievedRate = float64(res.Sent) / res.Window.Seconds()
		}
		res.GeneratorBound = generatorBound(res.hists[HistLag], res.hists[HistWake], res.Interval, res.Tick)
	}
	return nil
}

func orUnexpected(m ClientMessage) string {
	if m.Err != "" {
		return m.Err
	}
	return "unexpected message before ready"
}

// usageOf asks every server for its resource use.
func usageOf(ctx context.Context, servers []*child) ([]Usage, error) {
	out := make([]Usage, len(servers))
	for i, s := range servers {
		if err := s.send(cmdUsage); err != nil {
			return nil, err
		}
		if err := s.nextJSON(ctx, &out[i]); err != nil {
			return nil, fmt.Errorf("%s usage: %w", s.name, err)
		}
	}
	return out, nil
}

// fsyncsOf asks counter for every server's fsyncs so far; nil without a
// counter.
func fsyncsOf(ctx context.Context, counter FsyncCounter, addrs []string) ([]uint64, error) {
	if counter == nil {
		return nil, nil
	}
	out := make([]uint64, len(addrs))
	for i, a := range addrs {
		n, err := counter.Fsyncs(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("fsyncs of server %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

// fsyncsBetween sums every server's fsyncs from before to after.
func fsyncsBetween(before, after []uint64) (uint64, error) {
	var n uint64
	for i := range after {
		if after[i] < before[i] {
			return 0, fmt.Errorf("bench: server %d's fsync count went back from %d to %d: did it restart?", i, before[i], after[i])
		}
		n += after[i] - before[i]
	}
	return n, nil
}

// child is one spawned process and its line channels.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *Tail
	waited chan struct{}
	// waitErr is set before waited closes.
	waitErr error
}

func (r *Runner) spawn(ctx context.Context, name, sub string, spec any) (*child, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode %s spec: %w", name, err)
	}
	args := append(append([]string(nil), r.Args...), sub, "--spec", string(js))
	cmd := exec.Command(r.Exe, args...)
	if r.Env != nil {
		cmd.Env = r.Env
	}
	c := &child{name: name, cmd: cmd, lines: make(chan string, 64), stderr: NewTail(8 << 10), waited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("%s stdin: %w", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s stdout: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		// A result line carries encoded histograms.
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		// Wait only after stdout is drained, as os/exec requires.
		c.waitErr = cmd.Wait()
		close(c.waited)
	}()
	return c, nil
}

func (c *child) send(line string) error {
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		return fmt.Errorf("%s: write %q: %w", c.name, line, err)
	}
	return nil
}

// ErrChildExited is returned when a child ends before saying what was
// expected of it.
var ErrChildExited = errors.New("bench: child process exited")

func (c *child) next(ctx context.Context) (string, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			<-c.waited
			return "", fmt.Errorf("%w (%v); stderr: %s", ErrChildExited, c.waitErr, c.stderr.String())
		}
		return l, nil
	case <-ctx.Done():
		return "", fmt.Errorf("%s: %w; stderr: %s", c.name, ctx.Err(), c.stderr.String())
	}
}

func (c *child) nextJSON(ctx context.Context, v any) error {
	l, err := c.next(ctx)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(l), v); err != nil {
		return fmt.Errorf("%s: bad line %q: %w", c.name, l, err)
	}
	return nil
}

// stop closes stdin, which ends a server and lets a finished client go,
// waits for the exit and returns the process's lifetime usage.
func (c *child) stop(ctx context.Context) (Usage, error) {
	_ = c.stdin.Close()
	// Drain anything late so the reader can reach Wait.
	for open := true; open; {
		select {
		case _, open = <-c.lines:
		case <-ctx.Done():
			c.kill()
			return Usage{}, fmt.Errorf("%s did not exit: %w", c.name, ctx.Err())
		}
	}
	<-c.waited
	if c.waitErr != nil {
		return Usage{}, fmt.Errorf("%s: %w; stderr: %s", c.name, c.waitErr, c.stderr.String())
	}
	ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return Usage{}, nil
	}
	return rusageToUsage(ru), nil
}

// kill ends the process if it still runs and reaps it.
func (c *child) kill() {
	select {
	case <-c.waited:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	_ = c.stdin.Close()
	for range c.lines {
	}
	<-c.waited
}

// Tail keeps the last bytes written to it, up to a bound, for error
// messages: a child process's stderr, say. It is safe for concurrent use.
type Tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTail returns a Tail that keeps the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns what was kept, trimmed of surrounding space.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Executable returns the path of the running binary, for re-executing it.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	return exe, nil
}

// generatorBound reports whether the generator fell behind: its lag at p99
// exceeds one send interval, plus the tick it batches sends over, plus how
// late its sleeps ended at p99. Lag those explain is the machine's timers
// and scheduler (counted in the latency all the same); lag past them is
// the generator failing to issue sends as fast as they fell due.
func generatorBound(lag, wake *Recorder, interval, tick time.Duration) bool {
	if lag == nil || lag.Count() == 0 {
		return false
	}
	allowed := int64(interval + tick)
	if wake != nil && wake.Count() > 0 {
		allowed += wake.Histogram().ValueAtPercentile(99)
	}
	return lag.Histogram().ValueAtPercentile(99) > allowed
}
