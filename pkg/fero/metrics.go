package fero

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// WithMetrics registers the resource's Prometheus metrics on reg when
// Open starts its node, and unregisters them when the resource closes.
// Mount reg on your own mux (promhttp.HandlerFor) or use fero serve
// --http, which serves it at /metrics. Every metric is named fero_* and
// carries a "resource" label; docs/operations.md lists them.
//
// What the node counts anyway (commits, applies, dropped changes,
// restores, ownership changes, catch-up, the data directory's writes,
// members by state, partitions by role) is read when reg is scraped. This
// option also counts and times every write and call this node's callers
// make (fero_writes_total, fero_write_duration_seconds, fero_calls_total,
// fero_call_duration_seconds): a counter and a histogram observation per
// write, measured in docs/operations.md.
func WithMetrics(reg prometheus.Registerer) NodeOption {
	return nodeOption(func(c *config) { c.metrics = reg })
}

// registerMetrics registers the node's collector on the configured
// registry, if any.
func (r *Resource) registerMetrics() error {
	reg := r.cfg.metrics
	if reg == nil {
		return nil
	}
	col := r.n.Collector()
	if err := reg.Register(col); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return errors.New("fero: WithMetrics: the registry already has this resource's collector")
		}
		return err
	}
	r.collector = col
	return nil
}

// Ready reports whether this node serves its share of the cluster, the
// question a load balancer's or Kubernetes' readiness probe asks (fero
// serve --http answers it at /readyz): nil when it has joined and, for a
// server, its vote counts (it is not catching up), it sees a quorum of its
// configuration alive, it owns no partition it is still syncing, and its
// disk has not failed; otherwise an error that lists what is missing.
func (r *Resource) Ready(ctx context.Context) error {
	rd, err := r.n.Readiness(ctx)
	if err != nil {
		return err
	}
	if rd.Ready {
		return nil
	}
	return errors.New("fero: not ready: " + strings.Join(rd.Why, "; "))
}

// Healthy reports whether this node can go on without a restart, the
// question a liveness probe asks (fero serve --http answers it at
// /healthz): nil unless its data directory failed (a full disk, I/O
// errors, a read-only file system). A node whose disk failed has left
// the cluster and takes no writes, and does not come back by itself once
// the disk recovers: restarting the process does, which is what an
// orchestrator does when the probe fails (docs/operations.md).
func (r *Resource) Healthy() error {
	if err := r.n.DiskErr(); err != nil {
		return fmt.Errorf("fero: unhealthy: its data directory failed (%w): restart the process once the disk is fixed; it loads its data and rejoins", err)
	}
	return nil
}
