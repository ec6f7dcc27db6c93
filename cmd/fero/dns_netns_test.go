package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fero-go/fero/internal/protocol"
	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"
)

// netnsDNSNodes is how many namespaces, and fero serve processes, the
// netns DNS test runs.
const netnsDNSNodes = 3

// The ports every node takes on its own namespace's address: one
// namespace each, so all nodes can use the same ones.
const (
	netnsGossipPort = 7946
	netnsDataPort   = 7947
)

// dnsNet is a private network for the netns DNS test: a bridge in the
// root namespace holding 10.77.X.1/24, and per node a namespace joined to
// it by a veth pair, holding 10.77.X.(i+2)/24 on its eth0.
type dnsNet struct {
	bridge   string   // the bridge's name in the root namespace
	bridgeIP string   // its address, 10.77.X.1
	ns       []string // the namespaces, by node
	ip       []string // their addresses, by node
	hostVeth []string // each veth pair's root-namespace end
}

// ipCmd runs ip with args to completion and returns its output; the error
// carries what it printed.
func ipCmd(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// freeSubnet picks X for 10.77.X.0/24 such that no address or route of
// the root namespace mentions 10.77.X., starting from one derived from
// the PID so that concurrent runs tend to differ.
func freeSubnet(t *testing.T) int {
	t.Helper()
	addrs, err := ipCmd(context.Background(), "-4", "-o", "addr", "show")
	require.NoError(t, err)
	routes, err := ipCmd(context.Background(), "-4", "route", "show", "table", "all")
	require.NoError(t, err)
	used := addrs + routes
	start := os.Getpid() % 240
	for i := range 240 {
		x := (start+i)%240 + 10
		if !strings.Contains(used, fmt.Sprintf("10.77.%d.", x)) {
			return x
		}
	}
	t.Skip("skipping network namespace test: no free 10.77.X.0/24 subnet in the root namespace")
	return 0
}

// newDNSNet builds the network, skipping the test when this process may
// not (not root, no ip, namespaces refused). t.Cleanup removes all of it,
// whatever happened; it is registered before anything is made, so it runs
// after the Cleanups that end the processes inside.
func newDNSNet(t *testing.T, nodes int) *dnsNet {
	t.Helper()
	if syscall.Geteuid() != 0 {
		t.Skip("skipping network namespace test: needs root (run as root, or under sudo)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping network namespace test: no ip command (apt-get install iproute2)")
	}
	ctx := context.Background()
	sweepDNSNets(ctx)
	pid := os.Getpid()
	x := freeSubnet(t)
	n := &dnsNet{
		bridge:   fmt.Sprintf("fdns%db", pid), // interface names: at most 15 bytes
		bridgeIP: fmt.Sprintf("10.77.%d.1", x),
	}
	for i := range nodes {
		n.ns = append(n.ns, fmt.Sprintf("fero-dns-%d-n%d", pid, i))
		n.ip = append(n.ip, fmt.Sprintf("10.77.%d.%d", x, i+2))
		n.hostVeth = append(n.hostVeth, fmt.Sprintf("fdns%dv%d", pid, i))
	}
	t.Cleanup(func() {
		// Deleting a namespace destroys its veth end and so the pair;
		// the links are deleted too in case a namespace was never made.
		// Errors are "not there", which is the point.
		for i := range n.ns {
			_, _ = ipCmd(ctx, "netns", "del", n.ns[i])
			_, _ = ipCmd(ctx, "link", "del", n.hostVeth[i])
		}
		_, _ = ipCmd(ctx, "link", "del", n.bridge)
		var left []string
		if out, err := ipCmd(ctx, "netns", "list"); err == nil {
			for _, ns := range n.ns {
				if strings.Contains(out, ns) {
					left = append(left, "namespace "+ns)
				}
			}
		}
		if out, err := ipCmd(ctx, "-o", "link", "show"); err == nil {
			for _, l := range append([]string{n.bridge}, n.hostVeth...) {
				if strings.Contains(out, l) {
					left = append(left, "link "+l)
				}
			}
		}
		if len(left) > 0 {
			t.Errorf("network namespace test left behind: %s", strings.Join(left, ", "))
		}
	})
	// The first namespace and the bridge say whether this process may do
	// this at all (a container without CAP_SYS_ADMIN/NET_ADMIN may not).
	if _, err := ipCmd(ctx, "netns", "add", n.ns[0]); err != nil {
		t.Skipf("skipping network namespace test: cannot create a namespace: %v", err)
	}
	br := []string{"link", "add", n.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"}
	// Keep the host's iptables (br_netfilter) out of bridged traffic where
	// the kernel lets us say so.
	if _, err := ipCmd(ctx, append(br, "nf_call_iptables", "0")...); err != nil {
		if _, err := ipCmd(ctx, br...); err != nil {
			t.Skipf("skipping network namespace test: cannot create a bridge: %v", err)
		}
	}
	cmds := [][]string{
		{"addr", "add", n.bridgeIP + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	}
	for i, ns := range n.ns {
		if i > 0 {
			cmds = append(cmds, []string{"netns", "add", ns})
		}
		cmds = append(cmds,
			[]string{"-n", ns, "link", "set", "lo", "up"},
			// The namespace end is created straight in its namespace.
			[]string{"link", "add", n.hostVeth[i], "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"link", "set", n.hostVeth[i], "master", n.bridge, "up"},
			[]string{"-n", ns, "addr", "add", n.ip[i] + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, c := range cmds {
		_, err := ipCmd(ctx, c...)
		require.NoError(t, err)
	}
	return n
}

// sweepDNSNets removes what runs killed before their Cleanup left: the
// namespaces fero-dns-<pid>-… and links fdns<pid>… of a pid that no
// longer runs. Those of live runs are left alone.
func sweepDNSNets(ctx context.Context) {
	dead := func(pid string) bool {
		p, err := strconv.Atoi(pid)
		return err == nil && p > 0 && errors.Is(syscall.Kill(p, 0), syscall.ESRCH)
	}
	if out, err := ipCmd(ctx, "netns", "list"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			if rest, ok := strings.CutPrefix(f[0], "fero-dns-"); ok {
				if pid, _, ok := strings.Cut(rest, "-"); ok && dead(pid) {
					_, _ = ipCmd(ctx, "netns", "del", f[0])
				}
			}
		}
	}
	if out, err := ipCmd(ctx, "-o", "link", "show"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if rest, ok := strings.CutPrefix(name, "fdns"); ok {
				if i := strings.IndexAny(rest, "bv"); i > 0 && dead(rest[:i]) {
					_, _ = ipCmd(ctx, "link", "del", name)
				}
			}
		}
	}
}

// serveInNetns is serveIn with the process started in namespace ns by
// `ip netns exec` (which execs it: the PID is fero's own). Without
// --data-dir it passes --in-memory.
func serveInNetns(t *testing.T, ns string, args ...string) *server {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--data-dir") }) {
		args = append(args, "--in-memory")
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, os.Args[0], "serve"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	// A test killed with -9 takes its servers with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	first := make(chan bool, 1)
	go func() { first <- s.out.Scan() }()
	select {
	case ok := <-first:
		require.True(t, ok, "fero serve in %s printed nothing", ns)
	case <-time.After(15 * time.Second):
		t.Fatalf("fero serve in %s printed nothing in 15s", ns)
	}
	// fero: node <id> of "<resource>": gossip <addr> data <addr>
	s.first = s.out.Text()
	f := strings.Fields(s.first)
	require.Len(t, f, 9, "first line: %q", s.first)
	s.gossip, s.data = f[6], f[8]
	return s
}

// netnsDNSServer serves on UDP at addr SRV records for name, one per
// node, whose targets n<i>.<zone> have A records ips[i], all with port.
// It returns its address and the sources of the SRV questions it got.
func netnsDNSServer(t *testing.T, addr, zone, name string, ips []string, port int) (string, func() []string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	require.NoError(t, err)
	var mu sync.Mutex
	var from []string
	mux := dns.NewServeMux()
	mux.HandleFunc(zone, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeSRV && q.Name == name {
				host, _, _ := net.SplitHostPort(w.RemoteAddr().String())
				mu.Lock()
				from = append(from, host)
				mu.Unlock()
			}
			for i, ip := range ips {
				target := "n" + strconv.Itoa(i) + "." + zone
				switch {
				case q.Qtype == dns.TypeSRV && q.Name == name:
					m.Answer = append(m.Answer, &dns.SRV{
						Hdr:      dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 5},
						Priority: 0, Weight: 10, Port: uint16(port), Target: target,
					})
				case q.Qtype == dns.TypeA && q.Name == target:
					m.Answer = append(m.Answer, &dns.A{
						Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
						A:   net.ParseIP(ip),
					})
				}
			}
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: mux}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(from)
	}
}

// TestServeDNSDiscoveryNetns: three fero serve processes, each in a
// network namespace of its own with its own address, given no seeds, only
// --dns with the SRV name of a real DNS server (miekg/dns) that listens
// on the bridge in the root namespace, find each other through its SRV
// and A records, form one cluster over the bridge, and a write through
// one is read through another. Needs root; skips otherwise.
func TestServeDNSDiscoveryNetns(t *testing.T) {
	began := time.Now()
	n := newDNSNet(t, netnsDNSNodes)
	t.Logf("network ready in %v: bridge %s %s/24, nodes %v in %v", time.Since(began).Round(time.Millisecond), n.bridge, n.bridgeIP, n.ip, n.ns)

	const zone = "fero-test.svc."
	const name = "_gossip._tcp.fero." + zone
	resolver, srvFrom := netnsDNSServer(t, net.JoinHostPort(n.bridgeIP, "0"), zone, name, n.ip, netnsGossipPort)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := run(ctx, "secret")
	require.NoError(t, err)
	secret := filepath.Join(t.TempDir(), "cluster.secret")
	writeSecrets(t, secret, strings.TrimSpace(out))
	cred := []string{"--cluster-secret-file", secret}

	var ss []*server
	for i, ip := range n.ip {
		s := serveInNetns(t, n.ns[i], "kv", "--id", "d"+strconv.Itoa(i), "--partitions", "31",
			"--bind", net.JoinHostPort(ip, strconv.Itoa(netnsGossipPort)),
			"--listen", net.JoinHostPort(ip, strconv.Itoa(netnsDataPort)),
			"--cluster-secret-file", secret,
			"--dns", name, "--expect", "3", "--dns-server", resolver, "--log-level", "error")
		require.Equal(t, net.JoinHostPort(ip, strconv.Itoa(netnsGossipPort)), s.gossip, "gossip address of d%d", i)
		ss = append(ss, s)
	}

	// Every node, asked from the root namespace over the bridge, lists
	// the three servers at their namespace addresses, all connected, and
	// has its vote.
	want := []string{"d0", "d1", "d2"}
	last := make([]string, len(ss))
	formed := func() bool {
		ok := true
		for i, s := range ss {
			st, err := netnsStatus(ctx, s.data, cred)
			if err != nil {
				last[i] = err.Error()
				ok = false
				continue
			}
			var ids, bad []string
			for _, m := range st.Members {
				ids = append(ids, m.ID)
				if m.Status != "connected" || !slices.Contains(n.ip, hostOf(m.Gossip)) {
					bad = append(bad, fmt.Sprintf("%s %s at %s", m.ID, m.Status, m.Gossip))
				}
			}
			slices.Sort(ids)
			last[i] = fmt.Sprintf("members %v, not connected or not at a namespace address: %v, voting %v", ids, bad, st.Voting)
			if !slices.Equal(ids, want) || len(bad) > 0 || !st.Voting {
				ok = false
			}
		}
		return ok
	}
	deadline := time.Now().Add(20 * time.Second)
	for !formed() {
		if time.Now().After(deadline) {
			var b strings.Builder
			for i, s := range ss {
				fmt.Fprintf(&b, "\n  d%d (%s): %s", i, s.data, last[i])
			}
			from := srvFrom()
			t.Fatalf("the three nodes did not form one cluster through DNS in 20s (%d SRV questions, from %v):%s",
				len(from), slices.Compact(slices.Sorted(slices.Values(from))), b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("cluster of 3 formed %v after start", time.Since(began).Round(time.Millisecond))

	// A write through d0, read through d2.
	var putErr error
	for deadline := time.Now().Add(15 * time.Second); ; {
		if _, putErr = runFor(ctx, append([]string{"put", "--addr", ss[0].data, "found", `"by dns in netns"`}, cred...)...); putErr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put through d0 failed for 15s: %v", putErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var got string
	var getErr error
	for deadline := time.Now().Add(15 * time.Second); ; {
		got, getErr = runFor(ctx, append([]string{"get", "--addr", ss[2].data, "found"}, cred...)...)
		if getErr == nil && strings.TrimSpace(got) == `"by dns in netns"` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("get through d2 did not return the write through d0 in 15s: %q, %v", got, getErr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The discovery went through the DNS server, from the namespaces.
	from := srvFrom()
	require.NotEmpty(t, from, "the servers asked the DNS server")
	for _, h := range from {
		require.Contains(t, n.ip, h, "SRV questions come from the namespaces")
	}
	t.Logf("done in %v; %d SRV questions", time.Since(began).Round(time.Millisecond), len(from))
}

// runFor is run bounded to 3 seconds, so a poll never outlives its deadline
// by much.
func runFor(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return run(ctx, args...)
}

// netnsStatus is `fero status --json` against addr, run in this process.
func netnsStatus(ctx context.Context, addr string, cred []string) (*protocol.StatusReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := run(ctx, append([]string{"status", "--addr", addr, "--json"}, cred...)...)
	if err != nil {
		return nil, err
	}
	var st protocol.StatusReport
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, errors.New("status: " + err.Error())
	}
	return &st, nil
}

// hostOf returns the host of host:port, or s when it has no port.
func hostOf(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}
