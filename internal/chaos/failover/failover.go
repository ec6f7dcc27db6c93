// Package failover measures how long writes to a killed owner's keys stay
// unavailable: real `fero serve` processes on loopback, one client node
// writing to the keys of the server that owns the most partitions, SIGKILL
// of that server, and the time until every one of those keys takes a
// Majority write again. It is the figure docs/engine.md quotes per gossip
// preset (issue 16, rule 5); the fault suite checks the same kills for
// correctness, this package only times them.
package failover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/pkg/fero"
)

// Config says what to measure.
type Config struct {
	// Fero is the path of a built fero binary.
	Fero string
	// Preset is the gossip preset, "local" or "lan".
	Preset string
	// Servers is the cluster's size (default 3).
	Servers int
	// Keys is how many of the victim's keys are written (default 16).
	Keys int
	// Try bounds one write (default 250ms): a write in flight to the
	// killed owner ends at its deadline, and the writer tries again.
	Try time.Duration
	// Limit bounds the wait for recovery (default 60s).
	Limit time.Duration
	// Extra are more `fero serve` flags.
	Extra []string
}

// Result is one kill.
type Result struct {
	Victim string
	// First is when the first of the victim's keys took a write again,
	// All when the last did, both from the SIGKILL.
	First, All time.Duration
}

func (c *Config) defaults() {
	if c.Servers == 0 {
		c.Servers = 3
	}
	if c.Keys == 0 {
		c.Keys = 16
	}
	if c.Try == 0 {
		c.Try = 250 * time.Millisecond
	}
	if c.Limit == 0 {
		c.Limit = time.Minute
	}
}

type server struct {
	id     string
	cmd    *exec.Cmd
	gossip string
	data   string
}

// serveArgs are the flags every server gets; the client's options match
// them (partition count and placement must agree).
const partitions = 271

func start(ctx context.Context, c Config, id, seed string) (*server, error) {
	args := []string{"serve", "failover", "--id", id, "--listen", "127.0.0.1:0", "--bind", "127.0.0.1:0",
		"--preset", c.Preset, "--multicast=false", "--partitions", fmt.Sprint(partitions), "--in-memory"}
	if seed != "" {
		args = append(args, "--seeds", seed)
	}
	args = append(args, c.Extra...)
	cmd := exec.CommandContext(ctx, c.Fero, args...)
	cmd.Stderr = io.Discard
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("failover: %s printed nothing", id)
	}
	// fero: node <id> of "<resource>": gossip <host:port> data <host:port>
	f := strings.Fields(sc.Text())
	i := slices.Index(f, "gossip")
	if i < 0 || i+1 >= len(f) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("failover: %s: unexpected first line %q", id, sc.Text())
	}
	s := &server{id: id, cmd: cmd, gossip: f[i+1]}
	if j := slices.Index(f, "data"); j >= 0 && j+1 < len(f) {
		s.data = f[j+1]
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return s, nil
}

// Once runs one kill.
func Once(ctx context.Context, c Config) (Result, error) {
	c.defaults()
	cl, servers, stopAll, err := startCluster(ctx, c)
	defer stopAll()
	if err != nil {
		return Result{}, err
	}
	m, err := serverMap(servers)
	if err != nil {
		return Result{}, err
	}
	victim := biggest(m, servers)
	var keys []string
	for i := 0; len(keys) < c.Keys; i++ {
		k := fmt.Sprintf("k%d", i)
		if o, _ := m.OwnerOfKey(k); o.ID == victim.id {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if err := writeUntil(ctx, cl, k, c); err != nil {
			return Result{}, fmt.Errorf("failover: before the kill, %s: %w", k, err)
		}
	}

	// Writers on every key, then the kill; each writer notes its first
	// write invoked after the kill that succeeds.
	var (
		mu     sync.Mutex
		killed time.Time
		first  = map[string]time.Time{}
	)
	wctx, stop := context.WithTimeout(ctx, c.Limit)
	defer stop()
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for n := 0; wctx.Err() == nil; n++ {
				invoked := time.Now()
				try, cancel := context.WithTimeout(wctx, c.Try)
				err := cl.Update(try, k, n, fero.Majority)
				cancel()
				if err != nil {
					if !fero.Definite(err) || fero.CodeOf(err) == fero.CodeUnavailable {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				mu.Lock()
				if !killed.IsZero() && invoked.After(killed) {
					if _, ok := first[k]; !ok {
						first[k] = time.Now()
					}
					done := len(first) == len(keys)
					mu.Unlock()
					if done {
						stop()
					}
					return
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // writes flowing before the kill
	mu.Lock()
	err = victim.cmd.Process.Signal(syscall.SIGKILL)
	killed = time.Now()
	mu.Unlock()
	if err != nil {
		stop()
		wg.Wait()
		return Result{}, err
	}
	wg.Wait()
	if len(first) < len(keys) {
		return Result{}, fmt.Errorf("failover: %d of %d keys took no write within %v of the kill", len(keys)-len(first), len(keys), c.Limit)
	}
	res := Result{Victim: victim.id}
	for _, t := range first {
		d := t.Sub(killed)
		if res.First == 0 || d < res.First {
			res.First = d
		}
		res.All = max(res.All, d)
	}
	return res, nil
}

// startCluster starts c.Servers servers and a client node with opts (on
// top of what loopback and the servers need), and waits until the client
// sees every server. stop kills the servers and closes the client; call
// it even on an error.
func startCluster(ctx context.Context, c Config, opts ...fero.NodeOption) (cl *fero.Resource, servers []*server, stop func(), err error) {
	stop = func() {
		if cl != nil {
			_ = cl.Close()
		}
		for _, s := range servers {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	}
	for i := range c.Servers {
		seed := ""
		if i > 0 {
			seed = servers[0].gossip
		}
		s, err := start(ctx, c, fmt.Sprintf("s%d", i), seed)
		if err != nil {
			return nil, servers, stop, err
		}
		servers = append(servers, s)
	}
	preset := fero.PresetLocal
	if c.Preset == "lan" {
		preset = fero.PresetLAN
	}
	opts = append([]fero.NodeOption{fero.Client(), fero.WithID("client"), fero.WithSeeds(servers[0].gossip),
		fero.WithBind("127.0.0.1:0"), fero.WithListen("127.0.0.1:0"), fero.WithPreset(preset), fero.WithoutMulticast(),
		fero.WithPartitions(partitions)}, opts...)
	cl, err = fero.Open(ctx, "failover", opts...)
	if err != nil {
		return nil, servers, stop, err
	}
	if err := cl.WaitServers(ctx, c.Servers); err != nil {
		return cl, servers, stop, err
	}
	return cl, servers, stop, nil
}

// serverMap builds the servers' partition map: the ring places by ID
// alone, so the client can find the biggest owner and the keys it owns.
func serverMap(servers []*server) (*ring.Map, error) {
	r, err := ring.New(ring.WithPartitions(partitions))
	if err != nil {
		return nil, err
	}
	var ms []ring.Member
	for _, s := range servers {
		ms = append(ms, ring.Member{ID: s.id})
	}
	return r.Build(ms)
}

// biggest is the server that owns the most partitions of m.
func biggest(m *ring.Map, servers []*server) *server {
	victim := servers[0]
	for _, s := range servers {
		if len(m.Owned(s.id)) > len(m.Owned(victim.id)) {
			victim = s
		}
	}
	return victim
}

// writeUntil writes k until a Majority write succeeds (the cluster may
// still be syncing its first epochs).
func writeUntil(ctx context.Context, cl *fero.Resource, k string, c Config) error {
	deadline := time.Now().Add(c.Limit)
	for {
		try, cancel := context.WithTimeout(ctx, c.Try*4)
		err := cl.Update(try, k, 0, fero.Majority)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Build builds the fero binary into dir and returns its path.
func Build(ctx context.Context, dir string) (string, error) {
	bin := dir + "/fero"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fero-go/fero/cmd/fero")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}
