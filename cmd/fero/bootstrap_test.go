package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// What the phased DNS server answers.
const (
	dnsServfail int32 = iota
	dnsEmpty
	dnsRight
)

// phasedDNSServer is dnsServer whose answers follow *mode: SERVFAIL, an
// empty answer (NOERROR, no records), or the SRV and A records of addrs.
func phasedDNSServer(t *testing.T, name string, addrs []string, mode *atomic.Int32) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := dns.NewServeMux()
	mux.HandleFunc("fero.test.", func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		switch mode.Load() {
		case dnsServfail:
			m.Rcode = dns.RcodeServerFailure
		case dnsEmpty:
			// An authoritative answer with no records (a headless Service
			// with no endpoints yet); without the flags Go's resolver
			// takes it for a lame referral.
			m.Authoritative, m.RecursionAvailable = true, true
		case dnsRight:
			answerRecords(m, r, name, addrs)
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: mux}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// TestServeDNSBootstrap (issue 43): three servers given --dns and
// --expect 3 start while their DNS server answers SERVFAIL for 15 s, then
// nothing for 15 s, then the right records. Until the records come, each
// server warns what its lookups said, is not ready (/readyz 503, saying
// no cluster formed), and refuses every write at once ("cluster not
// formed") rather than take it; then the three form one cluster, and
// every write acked, throughout, is on every server. Before --expect, a
// server whose lookups failed founded a cluster of its own, passed
// /readyz, took writes, and they were dropped when the servers met.
func TestServeDNSBootstrap(t *testing.T) {
	const name = "_gossip._tcp.fero.test."
	var gossip, data, web []string
	for range 3 {
		gossip, data, web = append(gossip, freeAddr(t)), append(data, freeAddr(t)), append(web, freeAddr(t))
	}
	var mode atomic.Int32
	resolver := phasedDNSServer(t, name, gossip, &mode)
	began := time.Now()
	var ps []*proc
	for i := range gossip {
		ps = append(ps, startServe(t, "kv", "--in-memory", "--partitions", "31", "--id", "b"+strconv.Itoa(i),
			"--bind", gossip[i], "--listen", data[i], "--http", web[i],
			"--dns", name, "--expect", "3", "--dns-server", resolver))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A writer through every server, all along: each write is refused or
	// acked, and every acked one must be there at the end.
	var mu sync.Mutex
	acked := map[string]bool{}
	var refused, refusedSlow atomic.Int64
	wctx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for i := range data {
		writers.Go(func() {
			var r *fero.Remote
			for seq := 0; wctx.Err() == nil; seq++ {
				if r == nil {
					var err error
					if r, err = fero.Dial(wctx, data[i]); err != nil {
						r = nil
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				key := fmt.Sprintf("w%d-%d", i, seq)
				cctx, ccancel := context.WithTimeout(wctx, 5*time.Second)
				at := time.Now()
				err := r.Update(cctx, key, seq, fero.Majority)
				ccancel()
				switch {
				case err == nil:
					mu.Lock()
					acked[key] = true
					mu.Unlock()
				case strings.Contains(err.Error(), "cluster not formed"):
					refused.Add(1)
					if time.Since(at) > 2*time.Second {
						refusedSlow.Add(1)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			if r != nil {
				r.Close()
			}
		})
	}
	defer func() { stopWriters(); writers.Wait() }()

	// SERVFAIL: each warns, naming the failed lookup, and is not ready.
	for _, p := range ps {
		p.waitFor(t, false, `msg="fero: node: no cluster formed yet; this server takes no writes and is not ready until it forms one or joins a formed one: this server sees 1 of the 3 servers a new cluster needs (--expect): b`)
		// (The error names the system's resolver: --dns-server redirects
		// its dial, not its name.)
		p.waitFor(t, false, `dns="`+name+`: SRV lookup `+name+` on `)
		p.waitFor(t, false, `: server misbehaving"`)
	}
	for _, w := range web {
		code, body := httpGet(t, "http://"+w+"/readyz")
		require.Equal(t, http.StatusServiceUnavailable, code, body)
		require.Contains(t, body, "no cluster formed yet: this server sees 1 of the 3 servers")
	}
	require.Less(t, time.Since(began), 15*time.Second, "the SERVFAIL phase was too short for its checks")
	time.Sleep(15*time.Second - time.Since(began))

	// No records: warned too.
	mode.Store(dnsEmpty)
	for _, p := range ps {
		p.waitFor(t, false, `: no such host"`)
	}
	time.Sleep(30*time.Second - time.Since(began))
	require.Positive(t, refused.Load(), "writes were refused while no cluster formed")
	require.Zero(t, refusedSlow.Load(), "a write refused for want of a cluster is refused at once")
	mu.Lock()
	require.Empty(t, acked, "no write is acked before the cluster forms")
	mu.Unlock()

	// The right records: one cluster of the three.
	mode.Store(dnsRight)
	var ids []string
	require.Eventually(t, func() bool {
		for _, w := range web {
			if code, _ := httpGet(t, "http://"+w+"/readyz"); code != http.StatusOK {
				return false
			}
		}
		st, err := remoteStatus(ctx, data[0])
		if err != nil {
			return false
		}
		ids = ids[:0]
		for _, c := range st.Configuration {
			ids = append(ids, c.ID)
		}
		return strings.Join(ids, ",") == "b0,b1,b2"
	}, time.Minute, 50*time.Millisecond, "one cluster of the three once DNS answers: configuration %v", &ids)
	t.Logf("formed %v after the start, %v after DNS answered", time.Since(began).Round(time.Millisecond), (time.Since(began) - 30*time.Second).Round(time.Millisecond))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 30
	}, time.Minute, 50*time.Millisecond, "writes go through once the cluster formed")
	stopWriters()
	writers.Wait()

	// Every acked write, on every server.
	mu.Lock()
	defer mu.Unlock()
	for _, d := range data {
		r, err := fero.Dial(ctx, d)
		require.NoError(t, err)
		for key := range acked {
			require.Eventually(t, func() bool {
				var v int
				ok, err := r.Get(ctx, key, &v)
				return err == nil && ok
			}, 30*time.Second, 20*time.Millisecond, "acked write %s on %s", key, d)
		}
		r.Close()
	}
	t.Logf("%d writes acked, %d refused while no cluster formed", len(acked), refused.Load())
}

// TestServeSeedDownNamesIt (issue 43): of a new cluster of three servers,
// each given all three as seeds, one is down at the start. The two that
// run form nothing (a server given seeds forms a cluster only once it sees
// every seed), warn every few seconds naming the missing seed, and a `fero
// put` through one fails at once saying so; once the third starts, the
// three form one cluster and the put goes through. Before, the put
// waited out its timeout (~12 s) and printed only "context deadline
// exceeded". Then, with a seed down again, a server restarted on its data
// directory rejoins: a formed cluster never needs every seed.
func TestServeSeedDownNamesIt(t *testing.T) {
	var gossip, data []string
	for range 3 {
		gossip, data = append(gossip, freeAddr(t)), append(data, freeAddr(t))
	}
	seeds := strings.Join(gossip, ",")
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	args := func(i int) []string {
		return []string{"kv", "--data-dir", dirs[i], "--partitions", "31", "--id", "s" + strconv.Itoa(i),
			"--bind", gossip[i], "--listen", data[i], "--seeds", seeds}
	}
	var ps []*proc
	for i := range 2 {
		ps = append(ps, startServe(t, args(i)...))
	}
	for _, p := range ps {
		p.waitFor(t, false, "a new cluster forms once every seed is seen; seeds not seen: "+gossip[2])
		p.waitFor(t, false, gossip[2]+" (dial tcp "+gossip[2]+": connect: connection refused)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	at := time.Now()
	_, err := run(ctx, "put", "--addr", data[0], "k", "1")
	require.ErrorContains(t, err, "cluster not formed: a new cluster forms once every seed is seen; seeds not seen: "+gossip[2])
	require.Less(t, time.Since(at), 5*time.Second, "refused at once, not at its timeout")

	third := startServe(t, args(2)...)
	putWithin(ctx, t, data[0], "k", time.Minute, "the put goes through once the third server is up")
	// Formed: every server's own entry confirmed (each took its vote), so
	// each data directory holds a formed cluster's configuration. Killed
	// before that, two of three restarted servers would hold only the
	// guesses of a cluster still forming, and wait for every seed again.
	require.Eventually(t, func() bool {
		for _, d := range data {
			st, err := remoteStatus(ctx, d)
			if err != nil || !st.Voting {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "every server votes")

	// Rejoining a formed cluster needs no missing seed: with s2 down, s0
	// restarts on its data directory and rejoins through s1.
	require.NoError(t, third.cmd.Process.Kill())
	<-third.done
	require.NoError(t, ps[0].cmd.Process.Kill())
	<-ps[0].done
	startServe(t, args(0)...)
	putWithin(ctx, t, data[0], "k2", time.Minute, "s0, restarted with a seed down, rejoins and takes writes")
}

// putWithin retries `fero put --wait majority` of key through addr until
// it succeeds, and fails the test with the last error after d.
func putWithin(ctx context.Context, t *testing.T, addr, key string, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		out, err := run(ctx, "put", "--wait", "majority", "--addr", addr, key, "1")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v: %v\n%s", what, d, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
