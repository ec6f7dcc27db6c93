package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// dnsServer serves, on a loopback UDP port, SRV records for name whose
// targets are the hosts of addrs (host:port each, named n0.fero.test.,
// n1.fero.test., ...) and their A records, as a Kubernetes headless
// Service's DNS does for a StatefulSet. It returns the server's address
// and a count of the SRV questions it answered.
func dnsServer(t *testing.T, name string, addrs []string) (string, func() int) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	queries := 0
	mux := dns.NewServeMux()
	mux.HandleFunc("fero.test.", func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if answerRecords(m, r, name, addrs) {
			mu.Lock()
			queries++
			mu.Unlock()
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: mux}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return queries
	}
}

// answerRecords adds to m the answers to r's questions: SRV records for
// name whose targets are the hosts of addrs (n0.fero.test., ...), and
// those hosts' A records. It reports whether r asked for the SRV records.
func answerRecords(m, r *dns.Msg, name string, addrs []string) (srv bool) {
	for _, q := range r.Question {
		for i, a := range addrs {
			host, port, _ := net.SplitHostPort(a)
			p, _ := strconv.Atoi(port)
			target := "n" + strconv.Itoa(i) + ".fero.test."
			switch {
			case q.Qtype == dns.TypeSRV && q.Name == name:
				srv = true
				m.Answer = append(m.Answer, &dns.SRV{
					Hdr:      dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET},
					Priority: 0, Weight: 10, Port: uint16(p), Target: target,
				})
			case q.Qtype == dns.TypeA && q.Name == target:
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET},
					A:   net.ParseIP(host),
				})
			}
		}
	}
	return srv
}

// TestServeDNSDiscovery (issue 19): three fero serve processes given no
// seeds, only --dns with the SRV name of a real DNS server on loopback
// (--dns-server), find each other through its records, form one cluster
// and replicate a write to every node.
func TestServeDNSDiscovery(t *testing.T) {
	const name = "_gossip._tcp.fero.test."
	var gossip []string
	for range 3 {
		gossip = append(gossip, freeAddr(t))
	}
	resolver, srvQueries := dnsServer(t, name, gossip)
	var ss []*server
	for i, g := range gossip {
		ss = append(ss, serve(t, "kv", "--id", "d"+strconv.Itoa(i), "--bind", g,
			"--dns", name, "--expect", "3", "--dns-server", resolver, "--log-level", "error"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitReady(ctx, t, ss)
	r, err := fero.Dial(ctx, ss[0].data)
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, retryUnavailable(ctx, func() error { return r.Update(ctx, "found", "by dns", fero.Majority) }))
	for _, s := range ss {
		require.Eventually(t, func() bool {
			st, err := remoteStatus(ctx, s.data)
			return err == nil && st.Keys == 1
		}, time.Minute, 20*time.Millisecond, "the write reaches %s", s.data)
	}
	// One cluster of the three: the configuration grows to all three
	// once the joiners have synced, which may take a moment after the
	// write has reached them.
	var cfg []string
	require.Eventually(t, func() bool {
		st, err := remoteStatus(ctx, ss[2].data)
		if err != nil || len(st.Members) != 3 {
			return false
		}
		cfg = cfg[:0]
		for _, c := range st.Configuration {
			cfg = append(cfg, c.ID)
		}
		return strings.Join(cfg, ",") == "d0,d1,d2"
	}, time.Minute, 20*time.Millisecond, "one cluster of the three; the configuration is %v", &cfg)
	require.Positive(t, srvQueries(), "the servers asked the DNS server")
}
