package fero

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/partition"
)

// Store is where a service keeps the resource's state outside fero: a
// database, a file. With [WithConnect], a server node that finds no other
// server within the connect wait considers itself the first node of the
// cluster and calls Restore to load the initial state, which it writes
// into the resource (each key an acknowledged UPDATE). A node that finds a
// cluster gets the state from it and does not call Restore.
//
// If the Store is also a [Replayer], changes are replayed into it as they
// are applied.
type Store interface {
	// Restore calls put for every top-level key and value to restore. An
	// error from put (the resource closing, ctx ending) should be returned.
	Restore(ctx context.Context, put func(key string, value any) error) error
}

// Replayer receives changes to keep a Store up to date (the original's
// replay into add, update and remove).
//
// By default a node replays the changes it commits as the partition's
// owner (Kind Committed), so each change is replayed once across the
// cluster, by the node that committed it: the fit for a database that all
// nodes share. A change committed by an owner that crashes before its
// Replay returns is not replayed by anyone else. With [WithReplayAll] every
// node replays every change it applies: the fit for a store local to each
// node.
//
// Replay is called from one goroutine, in log order per partition, and the
// stream blocks: a slow Replay slows the node rather than lose a change. An
// error is logged and the next change follows.
type Replayer interface {
	Replay(ctx context.Context, c Change) error
}

// connect runs the restore decision and starts the replay.
func (r *Resource) connect(ctx context.Context) error {
	if rp, ok := r.cfg.store.(Replayer); ok {
		// Subscribe first, so no change applied from here on is missed.
		r.replay = r.n.Subscribe(DefaultBuffer, node.Block)
		r.replayWG.Add(1)
		go func() {
			defer r.replayWG.Done()
			r.replayLoop(rp)
		}()
	}
	if r.cfg.client {
		return nil
	}
	alone, err := r.alone(ctx)
	if err != nil || !alone {
		return err
	}
	r.logger.Info("fero: no cluster found; restoring from the store", "wait", r.cfg.connectWait)
	start := time.Now()
	var n int
	err = r.cfg.store.Restore(ctx, func(key string, value any) error {
		n++
		return r.Update(ctx, key, value, Ack)
	})
	if err != nil {
		return fmt.Errorf("fero: restore %s from its store after %d keys: %w", r.name, n, err)
	}
	r.logger.Info("fero: restored from the store", "keys", n, "took", time.Since(start))
	return nil
}

// alone waits up to the connect wait for another server; it reports
// whether none appeared.
func (r *Resource) alone(ctx context.Context) (bool, error) {
	deadline := time.NewTimer(r.cfg.connectWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, m := range r.n.Membership().Members() {
			if m.ID != r.n.ID() && m.Role != membership.RoleClient && m.Status.Live() {
				return false, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline.C:
			return true, nil
		case <-tick.C:
		}
	}
}

// awaitSeed waits up to the WithRequireSeeds wait for a node to answer at
// one of the seeds.
func (r *Resource) awaitSeed(ctx context.Context) error {
	ms := r.n.Membership()
	if !ms.HasSeeds() {
		return errs.New(errs.InvalidArgument, "WithRequireSeeds without seeds: give them with WithSeeds")
	}
	deadline := time.NewTimer(r.cfg.seedWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		seeds := ms.Seeds()
		if slices.ContainsFunc(seeds, func(s membership.SeedStatus) bool { return s.Answered }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			tried := make([]string, len(seeds))
			for i, s := range seeds {
				tried[i] = s.String()
			}
			return errs.Errorf(errs.Unavailable, "no seed answered within %v: %s; this node must join its cluster through a seed, so it does not start alone: check that each seed is the gossip address of a running node of %q (fero serve prints it when it starts), start a seed first, or wait longer (fero serve --seed-wait)",
				r.cfg.seedWait, strings.Join(tried, ", "), r.name)
		case <-tick.C:
		}
	}
}

func (r *Resource) replayLoop(rp Replayer) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for ch := range r.replay.C() {
		if !r.cfg.replayAll && ch.Kind != partition.EventCommitted {
			continue
		}
		if r.cfg.replayAll && ch.Kind == partition.EventRestored {
			// A restored partition has no single change to replay; say so.
			r.logger.Warn("fero: a partition was restored from a snapshot; its changes since the last replay are not replayed one by one", "partition", ch.Partition)
			continue
		}
		if err := rp.Replay(ctx, changeOf(ch)); err != nil {
			r.logger.Error("fero: replay into the store failed", "change", changeOf(ch).String(), "err", err)
		}
	}
}
