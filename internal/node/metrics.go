package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
)

// Prometheus metrics (docs/operations.md). Two kinds:
//
//   - What the node counts anyway (commits, applies, drops, restores,
//     ownership changes, catch-up, the disk's writes, members, partitions
//     by role) is read when the collector is scraped: it costs the hot path
//     nothing.
//   - The callers' writes and calls, by wait and result, and their
//     latencies, are counted as they complete, with Config.Metrics only:
//     an atomic add and a histogram observation per write, on counters
//     whose labels were resolved when the node started (no map lookup per
//     write; an error's code is looked up, errors being rare).

// latencyBuckets spans an unloaded loopback write (about 50 µs) to a
// write that waited out a sync (seconds).
var latencyBuckets = prometheus.ExponentialBucketsRange(50e-6, 10, 18)

// waitNames label writes by their wait, indexed by partition.Wait.
var waitNames = [...]string{
	partition.WaitNone:     "none",
	partition.WaitAck:      "ack",
	partition.WaitMajority: "majority",
	partition.WaitReplicas: "replicas",
}

// hotMetrics are the metrics the write and call paths update.
type hotMetrics struct {
	writes     *prometheus.CounterVec // resource from the const labels; wait, result
	writesOK   [len(waitNames)]prometheus.Counter
	writeTime  [len(waitNames)]prometheus.Observer
	calls      *prometheus.CounterVec // result
	callsOK    prometheus.Counter
	callTime   prometheus.Histogram
	syncTime   prometheus.Histogram
	collectors []prometheus.Collector
	// traffic gathers the write and call metrics alone, for Traffic.
	traffic *prometheus.Registry
}

func newHotMetrics(resource string) *hotMetrics {
	labels := prometheus.Labels{"resource": resource}
	m := &hotMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fero_writes_total", ConstLabels: labels,
			Help: "Writes this node's callers made (the library's and remote clients'), by the wait they asked for and how they ended (ok, or the error's code; wait none ends as queued).",
		}, []string{"wait", "result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fero_calls_total", ConstLabels: labels,
			Help: "Calls of custom verbs this node's callers made, by how they ended (ok, or the error's code).",
		}, []string{"result"}),
		callTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fero_call_duration_seconds", ConstLabels: labels, Buckets: latencyBuckets,
			Help: "How long successful calls of custom verbs took, from the caller's request to its answer (failed ones are counted in fero_calls_total by code).",
		}),
		syncTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fero_sync_duration_seconds", ConstLabels: labels, Buckets: prometheus.ExponentialBucketsRange(1e-3, 60, 16),
			Help: "How long this node's syncs took, from becoming a partition's owner by its map to starting its epoch (docs/engine.md rule 4): the time the partition took no writes.",
		}),
	}
	writeTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fero_write_duration_seconds", ConstLabels: labels, Buckets: latencyBuckets,
		Help: "How long successful writes took, from the caller's request to its answer, by the wait asked for (none is not timed: it is answered once queued). Failed writes are counted in fero_writes_total by code, not timed here.",
	}, []string{"wait"})
	for w, name := range waitNames {
		result := "ok"
		if partition.Wait(w) == partition.WaitNone {
			result = "queued"
		} else {
			m.writeTime[w] = writeTime.WithLabelValues(name)
		}
		m.writesOK[w] = m.writes.WithLabelValues(name, result)
	}
	m.callsOK = m.calls.WithLabelValues("ok")
	m.collectors = []prometheus.Collector{m.writes, writeTime, m.calls, m.callTime, m.syncTime}
	m.traffic = prometheus.NewRegistry()
	m.traffic.MustRegister(m.writes, writeTime, m.calls, m.callTime)
	return m
}

// Traffic reads the write and call metrics; false without Config.Metrics.
func (n *Node) Traffic() (protocol.Traffic, bool) {
	m := n.hot
	if m == nil {
		return protocol.Traffic{}, false
	}
	mfs, err := m.traffic.Gather()
	if err != nil {
		return protocol.Traffic{}, false
	}
	t := protocol.Traffic{Bounds: latencyBuckets, Errors: map[string]uint64{}}
	t.WriteBuckets = make([]uint64, len(latencyBuckets))
	t.CallBuckets = make([]uint64, len(latencyBuckets))
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			switch mf.GetName() {
			case "fero_writes_total", "fero_calls_total":
				v := uint64(mt.GetCounter().GetValue())
				result := ""
				for _, l := range mt.GetLabel() {
					if l.GetName() == "result" {
						result = l.GetValue()
					}
				}
				switch {
				case result != "ok" && result != "queued":
					t.Errors[result] += v
				case mf.GetName() == "fero_writes_total":
					t.Writes += v
				default:
					t.Calls += v
				}
			case "fero_write_duration_seconds":
				t.WriteCount += addBuckets(t.WriteBuckets, mt.GetHistogram())
			case "fero_call_duration_seconds":
				t.CallCount += addBuckets(t.CallBuckets, mt.GetHistogram())
			}
		}
	}
	return t, true
}

// addBuckets adds h's cumulative bucket counts to into (whose bounds are
// latencyBuckets) and returns h's count.
func addBuckets(into []uint64, h *dto.Histogram) uint64 {
	for i, b := range h.GetBucket() {
		if i < len(into) {
			into[i] += b.GetCumulativeCount()
		}
	}
	return h.GetSampleCount()
}

// wrote counts a write that ended with err after took.
func (m *hotMetrics) wrote(w partition.Wait, err error, took time.Duration) {
	if int(w) >= len(waitNames) {
		return
	}
	if err != nil {
		// Counted apart, by code, and not timed: a refusal's quick answer
		// would make an outage look fast.
		m.writes.WithLabelValues(waitNames[w], errs.CodeOf(err).String()).Inc()
		return
	}
	m.writesOK[w].Inc()
	if o := m.writeTime[w]; o != nil {
		o.Observe(took.Seconds())
	}
}

// called counts a call that ended with err after took.
func (m *hotMetrics) called(err error, took time.Duration) {
	if err != nil {
		m.calls.WithLabelValues(errs.CodeOf(err).String()).Inc()
		return
	}
	m.callsOK.Inc()
	m.callTime.Observe(took.Seconds())
}

// Collector returns the node's Prometheus collector: the metrics read at
// scrape time, and with Config.Metrics the write and call metrics. Every
// metric carries a "resource" label.
func (n *Node) Collector() prometheus.Collector { return (*nodeCollector)(n) }

type nodeCollector Node

var (
	descLabels = []string{"resource"}
	descs      = struct {
		committed, applied, dropped, restored, gained, lost *prometheus.Desc
		members, partitions, voting, keys                   *prometheus.Desc
		catchUpPieces, catchUpBytes, catchUpStale           *prometheus.Desc
		catchUpBusy, catchUpRetries                         *prometheus.Desc
		catchUps, catchUpSeconds, catchUpLast               *prometheus.Desc
		diskBytes, diskSyncs, diskWrite, diskSnapshots      *prometheus.Desc
		diskSnapshotBytes, diskBehind, diskFailed           *prometheus.Desc
		subscriberDrops, lagOffsets, lagSeconds             *prometheus.Desc
		outboxBytes, bpWaits, bpSeconds                     *prometheus.Desc
		preAuthRefusals, dataConns                          *prometheus.Desc
		configServers, configQuorum, configAlive, ready     *prometheus.Desc
	}{
		configServers:     prometheus.NewDesc("fero_configuration_servers", "Servers in the cluster's configuration as this server knows it (forgotten ones not counted): the servers whose majority makes a quorum (docs/engine.md rule 9).", descLabels, nil),
		configQuorum:      prometheus.NewDesc("fero_configuration_quorum", "Servers of the configuration that make a quorum (a majority).", descLabels, nil),
		configAlive:       prometheus.NewDesc("fero_configuration_servers_alive", "Servers of the configuration this server sees alive (connected or suspect, itself included). Writes need fero_configuration_quorum of them.", descLabels, nil),
		ready:             prometheus.NewDesc("fero_ready", "1 when the node is ready (what /readyz answers 200 for), else 0.", descLabels, nil),
		committed:         prometheus.NewDesc("fero_commits_total", "Changes this node committed as a partition's owner.", descLabels, nil),
		applied:           prometheus.NewDesc("fero_applied_total", "Owners' commits applied to this node's copy.", descLabels, nil),
		dropped:           prometheus.NewDesc("fero_dropped_total", "Changes this node applied and then undid because another history replaced them (never Majority-acked ones; docs/engine.md rule 6).", descLabels, nil),
		restored:          prometheus.NewDesc("fero_restored_partitions_total", "Partitions whose copy was replaced by a snapshot from a peer.", descLabels, nil),
		gained:            prometheus.NewDesc("fero_ownership_gained_total", "Partitions this node took ownership of.", descLabels, nil),
		lost:              prometheus.NewDesc("fero_ownership_lost_total", "Partitions this node stopped owning.", descLabels, nil),
		members:           prometheus.NewDesc("fero_members", "Members this node's gossip knows, by role and state.", []string{"resource", "role", "state"}, nil),
		partitions:        prometheus.NewDesc("fero_partitions", "This node's partitions by role (owner, replica, syncing, ...).", []string{"resource", "role"}, nil),
		voting:            prometheus.NewDesc("fero_voting", "1 when this server's vote counts in the configuration, 0 while it catches up (a learner) or is a client.", descLabels, nil),
		keys:              prometheus.NewDesc("fero_keys", "Keys in this node's copy.", descLabels, nil),
		catchUpPieces:     prometheus.NewDesc("fero_catchup_snapshot_replies_total", "Snapshot replies (whole states or pieces) this node received while catching up.", descLabels, nil),
		catchUpBytes:      prometheus.NewDesc("fero_catchup_snapshot_bytes_total", "Bytes of state in the snapshot replies this node received.", descLabels, nil),
		catchUpStale:      prometheus.NewDesc("fero_catchup_stale_replies_total", "Snapshot replies that came too late to be used.", descLabels, nil),
		catchUpBusy:       prometheus.NewDesc("fero_catchup_busy_replies_total", "Fetches a peer answered Busy (its snapshots in flight to this node at their bound).", descLabels, nil),
		catchUpRetries:    prometheus.NewDesc("fero_catchup_fetch_retries_total", "Fetches asked again because no answer came in time.", descLabels, nil),
		catchUps:          prometheus.NewDesc("fero_catchups_total", "Catch-ups this server finished: from the first moment it was a learner (its vote not counting, after a start, a restart or a join) to its vote counting.", descLabels, nil),
		catchUpSeconds:    prometheus.NewDesc("fero_catchup_seconds_total", "Time the finished catch-ups took, together.", descLabels, nil),
		catchUpLast:       prometheus.NewDesc("fero_catchup_last_seconds", "How long the last finished catch-up took (0 before any).", descLabels, nil),
		diskBytes:         prometheus.NewDesc("fero_disk_bytes", "Size of the data directory.", descLabels, nil),
		diskSyncs:         prometheus.NewDesc("fero_disk_fsyncs_total", "fsyncs of write groups.", descLabels, nil),
		diskWrite:         prometheus.NewDesc("fero_disk_write_seconds_total", "Time the driver spent writing rounds to the disk, fsyncs included.", descLabels, nil),
		diskSnapshots:     prometheus.NewDesc("fero_disk_snapshots_total", "Snapshots saved to the data directory.", descLabels, nil),
		diskSnapshotBytes: prometheus.NewDesc("fero_disk_snapshot_bytes_total", "Bytes of state in the snapshots saved.", descLabels, nil),
		diskBehind:        prometheus.NewDesc("fero_disk_partitions_behind", "Partitions whose last offset on disk trails the last one applied (0 after every round under fsync group).", descLabels, nil),
		diskFailed:        prometheus.NewDesc("fero_disk_failed", "1 once the data directory failed (the node left the cluster and takes no writes until restarted).", descLabels, nil),
		lagOffsets:        prometheus.NewDesc("fero_replication_lag_offsets", "On a partition's owner: how many offsets its slowest live copy's acks trail the log.", []string{"resource", "partition"}, nil),
		lagSeconds:        prometheus.NewDesc("fero_replication_lag_seconds", "On a partition's owner: how long its slowest trailing copy's acks have not moved (0 when no copy trails).", []string{"resource", "partition"}, nil),
		outboxBytes:       prometheus.NewDesc("fero_peer_outbox_bytes", "Bytes waiting in the outboxes of this node's connections to its peers.", descLabels, nil),
		bpWaits:           prometheus.NewDesc("fero_backpressure_waits_total", "Sends that waited for room in a connection's full outbox (the peer or the network not keeping up).", descLabels, nil),
		bpSeconds:         prometheus.NewDesc("fero_backpressure_wait_seconds_total", "Time sends spent waiting for room in full outboxes.", descLabels, nil),
		preAuthRefusals:   prometheus.NewDesc("fero_preauth_refusals_total", "Data connections that had proved no credential, refused or closed, by reason: frame_too_large (a frame over --auth-max-frame), auth_timeout (nothing proved within --auth-timeout), cap_per_ip and cap_total (--max-unproved-conns-per-ip, --max-unproved-conns: the newcomer refused, or at cap_total an older stranger closed for it), rate_per_ip (more new connections from one source IP than --new-conn-rate allows), needs_proof (a request or engine message that needs a credential). docs/security.md, The pre-auth budget.", []string{"resource", "reason"}, nil),
		dataConns:         prometheus.NewDesc("fero_data_connections", "Connections the data port holds, by state: proved (a peer's or a client's that proved a credential, or any on a node without credentials) or unproved.", []string{"resource", "state"}, nil),
		subscriberDrops:   prometheus.NewDesc("fero_subscriber_overflows_total", "Changes a slow subscriber missed (its stream was cut or its oldest changes dropped, as its overflow policy says).", descLabels, nil),
	}
)

// Describe describes nothing: the collector is unchecked, since which
// series it has depends on the cluster (members by state, partitions by
// role), and describing by collecting would query the engine at
// registration.
func (c *nodeCollector) Describe(chan<- *prometheus.Desc) {}

// scrapeTimeout bounds the engine queries of a scrape.
const scrapeTimeout = 5 * time.Second

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := (*Node)(c)
	res := n.cfg.Resource
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, res)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, res)
	}
	s := n.Stats()
	counter(descs.committed, float64(s.Committed))
	counter(descs.applied, float64(s.Applied))
	counter(descs.dropped, float64(s.Dropped))
	counter(descs.restored, float64(s.Restored))
	counter(descs.gained, float64(s.Gained))
	counter(descs.lost, float64(s.Lost))
	counter(descs.subscriberDrops, float64(n.subs.drops.Load()))
	gauge(descs.outboxBytes, float64(n.peers.queued()))
	counter(descs.bpWaits, float64(n.tstats.BackpressureWaits.Load()))
	counter(descs.bpSeconds, time.Duration(n.tstats.BackpressureNanos.Load()).Seconds())
	for _, r := range []struct {
		reason string
		v      uint64
	}{
		{"frame_too_large", n.tstats.PreAuthFrameTooLarge.Load()}, {"auth_timeout", n.tstats.PreAuthTimeouts.Load()},
		{"cap_per_ip", n.tstats.PreAuthCapPerIP.Load()}, {"cap_total", n.tstats.PreAuthCapTotal.Load()},
		{"rate_per_ip", n.tstats.PreAuthRate.Load()},
		{"needs_proof", n.stats.needProof.Load()},
	} {
		ch <- prometheus.MustNewConstMetric(descs.preAuthRefusals, prometheus.CounterValue, float64(r.v), res, r.reason)
	}
	proved, unproved := n.srv.Conns()
	ch <- prometheus.MustNewConstMetric(descs.dataConns, prometheus.GaugeValue, float64(proved), res, "proved")
	ch <- prometheus.MustNewConstMetric(descs.dataConns, prometheus.GaugeValue, float64(unproved), res, "unproved")
	gauge(descs.keys, float64(n.store.Len()))
	counter(descs.catchUps, float64(n.stats.catchUps.Load()))
	counter(descs.catchUpSeconds, time.Duration(n.stats.catchUpNanos.Load()).Seconds())
	gauge(descs.catchUpLast, time.Duration(n.stats.lastCatchUp.Load()).Seconds())

	type key struct{ role, state string }
	members := map[key]int{}
	// Every state of a server, so that an alert on dead ones has a series
	// at 0 before the first dies.
	for _, st := range []membership.Status{membership.StatusConnecting, membership.StatusConnected, membership.StatusSuspect, membership.StatusDead} {
		members[key{"server", st.String()}] = 0
	}
	for _, m := range n.ms.Known() {
		members[key{m.Role.String(), m.Status.String()}]++
	}
	for k, v := range members {
		ch <- prometheus.MustNewConstMetric(descs.members, prometheus.GaugeValue, float64(v), res, k.role, k.state)
	}

	ctx, cancel := context.WithTimeout(n.ctx, scrapeTimeout)
	defer cancel()
	if st, err := n.Status(ctx); err == nil {
		roles := map[string]int{}
		behind := 0
		for _, p := range st {
			roles[p.Role.String()]++
			if p.Role == partition.RoleOwner {
				part := strconv.Itoa(p.Partition)
				ch <- prometheus.MustNewConstMetric(descs.lagOffsets, prometheus.GaugeValue, float64(p.Lag), res, part)
				ch <- prometheus.MustNewConstMetric(descs.lagSeconds, prometheus.GaugeValue, p.LagSeconds, res, part)
			}
			if n.disk != nil {
				if _, onDisk, err := n.disk.store.Bounds(p.Partition); err == nil && onDisk < p.Position.Offset {
					behind++
				}
			}
		}
		for role, v := range roles {
			ch <- prometheus.MustNewConstMetric(descs.partitions, prometheus.GaugeValue, float64(v), res, role)
		}
		if n.disk != nil {
			gauge(descs.diskBehind, float64(behind))
		}
	}
	if ci, err := n.clusterInfo(ctx); err == nil {
		voting := 0.0
		if ci.voting {
			voting = 1
		}
		gauge(descs.voting, voting)
		if !n.cfg.Client {
			cv := n.configView(ci)
			gauge(descs.configServers, float64(cv.servers))
			gauge(descs.configQuorum, float64(cv.quorum))
			gauge(descs.configAlive, float64(cv.alive))
		}
		cu := ci.catchUp
		counter(descs.catchUpPieces, float64(cu.Pieces))
		counter(descs.catchUpBytes, float64(cu.PieceBytes))
		counter(descs.catchUpStale, float64(cu.Stale))
		counter(descs.catchUpBusy, float64(cu.Busy))
		counter(descs.catchUpRetries, float64(cu.Retries))
	}
	if rd, err := n.Readiness(ctx); err == nil {
		ready := 0.0
		if rd.Ready {
			ready = 1
		}
		gauge(descs.ready, ready)
	}
	if d := n.disk; d != nil {
		r := d.report(n.cfg.DataDir)
		gauge(descs.diskBytes, float64(r.Bytes))
		counter(descs.diskSyncs, float64(r.Syncs))
		counter(descs.diskWrite, r.WriteSeconds)
		counter(descs.diskSnapshots, float64(r.Snapshots))
		counter(descs.diskSnapshotBytes, float64(r.SnapshotBytes))
		failed := 0.0
		if r.Err != "" {
			failed = 1
		}
		gauge(descs.diskFailed, failed)
	}
	if m := n.hot; m != nil {
		for _, col := range m.collectors {
			col.Collect(ch)
		}
	}
}

// Readiness checks that the node has joined (its engine has a partition
// map with it in it), and, for a server, that its vote counts (it is not a
// learner still catching up), that it sees a quorum of its configuration
// alive, that it owns nothing it is still syncing, and that its disk has
// not failed. A client node needs a map with a server in it.
func (n *Node) Readiness(ctx context.Context) (protocol.Readiness, error) {
	var why []string
	m := n.EngineMap()
	switch {
	case m == nil:
		why = append(why, "no partition map yet: it has not joined a cluster")
	case n.cfg.Client && len(m.Members()) == 0:
		why = append(why, "its map has no server")
	case !n.cfg.Client && !slices.ContainsFunc(m.Members(), func(x ring.Member) bool { return x.ID == n.id }):
		why = append(why, "its partition map does not include it yet")
	}
	if n.cfg.Client {
		return protocol.Readiness{Ready: len(why) == 0, Why: why}, nil
	}
	if n.disk != nil && n.disk.err() != nil {
		why = append(why, "its data directory failed: "+n.disk.err().Error())
	}
	ci, err := n.clusterInfo(ctx)
	if err != nil {
		return protocol.Readiness{}, err
	}
	if ci.forming != "" {
		// First: the rest (not voting, no quorum) follows from it.
		why = append([]string{"no cluster formed yet: " + ci.forming}, why...)
	} else if !ci.voting {
		why = append(why, "its vote does not count yet: it is catching up (a learner)")
	}
	cv := n.configView(ci)
	if cv.servers == 0 || cv.alive < cv.quorum {
		why = append(why, fmt.Sprintf("it sees %d of the %d servers of its configuration alive; a quorum is %d", cv.alive, cv.servers, cv.quorum))
	}
	st, err := n.Status(ctx)
	if err != nil {
		return protocol.Readiness{}, err
	}
	syncing := 0
	for _, s := range st {
		if s.Role == partition.RoleSyncing {
			syncing++
		}
	}
	if syncing > 0 {
		why = append(why, fmt.Sprintf("%d partitions it owns are still syncing", syncing))
	}
	if len(why) > 0 && len(cv.missing) > 0 {
		// Named first: the servers it does not see are most often why
		// the rest (partitions syncing, no quorum) follows. A server
		// missing alone does not make it unready while a quorum is there.
		why = append([]string{"servers of its configuration not alive: " + strings.Join(cv.missing, ", ")}, why...)
	}
	return protocol.Readiness{Ready: len(why) == 0, Why: why}, nil
}

// configurationView is the configuration as one node sees it: its
// servers (not forgotten), the quorum, how many it sees alive (connected
// or suspect, itself included), and the others, each as "ID (state)".
type configurationView struct {
	servers, quorum, alive int
	missing                []string
}

func (n *Node) configView(ci clusterView) configurationView {
	state := map[string]membership.Status{}
	for _, mem := range n.ms.Known() {
		state[mem.ID] = mem.Status
	}
	var cv configurationView
	for _, v := range ci.voters {
		if v.Left {
			continue
		}
		cv.servers++
		st, known := state[v.ID]
		switch {
		case v.ID == n.id || st == membership.StatusConnected:
			cv.alive++
		case st == membership.StatusSuspect:
			cv.alive++
			cv.missing = append(cv.missing, v.ID+" (suspect)")
		case known:
			cv.missing = append(cv.missing, fmt.Sprintf("%s (%v)", v.ID, st))
		default:
			cv.missing = append(cv.missing, v.ID+" (unknown to its gossip)")
		}
	}
	cv.quorum = cv.servers/2 + 1
	return cv
}
