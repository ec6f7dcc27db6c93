package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// DropsFor is the drop rules a network fault puts in each node's input
// chain, by node; nodes lists every node of the net, ip gives addresses.
// Kinds that drop nothing give nil.
func DropsFor(f Fault, nodes []string, ip func(string) string) map[string][]Drop {
	out := map[string][]Drop{}
	// cut drops what b receives from a, at pct percent.
	cut := func(a, b string, pct int) {
		out[b] = append(out[b], Drop{From: ip(a), Percent: pct, Fault: f.ID})
	}
	both := func(a, b string, pct int) { cut(a, b, pct); cut(b, a, pct) }
	switch f.Kind {
	case KindPartition, KindBridge:
		// Nodes in different groups cannot talk; a bridge's Node is in no
		// group, so it keeps talking to both.
		for i, g := range f.Groups {
			for _, h := range f.Groups[i+1:] {
				for _, a := range g {
					for _, b := range h {
						both(a, b, 100)
					}
				}
			}
		}
	case KindIsolate, KindLoss:
		pct := 100
		if f.Kind == KindLoss {
			pct = f.Percent
		}
		for _, o := range nodes {
			if o != f.Node {
				both(f.Node, o, pct)
			}
		}
	case KindOneWay:
		cut(f.From, f.To, 100)
	default:
		return nil
	}
	return out
}

// ShapeFor is the shape a link fault puts on its node's link.
func ShapeFor(f Fault) (Shape, bool) {
	switch f.Kind {
	case KindDelay:
		return Shape{Delay: f.Delay, Jitter: f.Jitter}, true
	case KindReorder:
		return Shape{Delay: f.Delay, Reorder: f.Percent}, true
	case KindSlow:
		return Shape{RateKbit: f.RateKbit}, true
	}
	return Shape{}, false
}

// ErrSkipped: a process fault was not applied because restarted servers
// had not caught up; with it, a majority of the configuration would have
// lost its memory, which no cluster without disks survives (see
// Cluster.WaitVoting). The schedule goes on without it.
var ErrSkipped = errors.New("skipped: restarted servers had not caught up")

// Injector applies faults to a net and a cluster and undoes them. Drop
// rules and shapes of overlapping faults are combined per node: each
// change rewrites the node's whole rule set from what is still active.
type Injector struct {
	net *Net
	cl  *Cluster
	// ClockJump applies a KindClock fault; without it clock faults fail.
	ClockJump func(ctx context.Context, node string, jump time.Duration) error

	drops  map[int]map[string][]Drop // by fault ID, by node
	shapes map[int]map[string]Shape
	active map[int]Fault
}

// NewInjector returns an injector for n and cl (cl may be nil for a net
// without servers: process faults then fail).
func NewInjector(n *Net, cl *Cluster) *Injector {
	return &Injector{
		net: n, cl: cl,
		drops: map[int]map[string][]Drop{}, shapes: map[int]map[string]Shape{}, active: map[int]Fault{},
	}
}

// Start applies f. A fault whose start failed is not active and its Undo
// does nothing.
func (j *Injector) Start(ctx context.Context, f Fault) error {
	if _, ok := j.active[f.ID]; ok {
		return fmt.Errorf("chaos: %s: already active", f)
	}
	var err error
	switch {
	case f.Kind.shape():
		s, _ := ShapeFor(f)
		j.shapes[f.ID] = map[string]Shape{f.Node: s}
		if err = j.reshape(ctx, f.Node); err != nil {
			delete(j.shapes, f.ID)
		}
	case f.Kind.process():
		err = j.process(ctx, f, false)
	case f.Kind == KindClock:
		err = j.clock(ctx, f.Node, f.Jump)
	default:
		d := DropsFor(f, j.net.Nodes(), j.net.IP)
		if d == nil {
			return fmt.Errorf("chaos: %s: unknown kind", f)
		}
		j.drops[f.ID] = d
		if err = j.redrop(ctx, slices.Collect(maps.Keys(d))); err != nil {
			delete(j.drops, f.ID)
			err = errors.Join(err, j.redrop(ctx, slices.Collect(maps.Keys(d))))
		}
	}
	if err != nil {
		return fmt.Errorf("chaos: start %s: %w", f, err)
	}
	j.active[f.ID] = f
	return nil
}

// Undo undoes f, if its start took effect.
func (j *Injector) Undo(ctx context.Context, f Fault) error {
	if _, ok := j.active[f.ID]; !ok {
		return nil
	}
	delete(j.active, f.ID)
	var err error
	switch {
	case f.Kind.shape():
		delete(j.shapes, f.ID)
		err = j.reshape(ctx, f.Node)
	case f.Kind.process():
		err = j.process(ctx, f, true)
	case f.Kind == KindClock:
		err = j.clock(ctx, f.Node, -f.Jump)
	default:
		d := j.drops[f.ID]
		delete(j.drops, f.ID)
		err = j.redrop(ctx, slices.Collect(maps.Keys(d)))
	}
	if err != nil {
		return fmt.Errorf("chaos: undo %s: %w", f, err)
	}
	return nil
}

// UndoAll undoes every active fault, latest first.
func (j *Injector) UndoAll(ctx context.Context) error {
	ids := slices.Sorted(maps.Keys(j.active))
	slices.Reverse(ids)
	var errs []error
	for _, id := range ids {
		errs = append(errs, j.Undo(ctx, j.active[id]))
	}
	return errors.Join(errs...)
}

// Active returns the faults in effect, by ID.
func (j *Injector) Active() []Fault {
	ids := slices.Sorted(maps.Keys(j.active))
	out := make([]Fault, len(ids))
	for i, id := range ids {
		out[i] = j.active[id]
	}
	return out
}

// redrop rewrites the drop rules of nodes from every active fault.
func (j *Injector) redrop(ctx context.Context, nodes []string) error {
	slices.Sort(nodes)
	var errs []error
	for _, n := range nodes {
		var all []Drop
		for _, d := range j.drops {
			all = append(all, d[n]...)
		}
		errs = append(errs, j.net.SetDrops(ctx, n, all))
	}
	return errors.Join(errs...)
}

// reshape sets node's link shape from every active shape fault on it.
func (j *Injector) reshape(ctx context.Context, node string) error {
	var s Shape
	for _, m := range j.shapes {
		s = s.merge(m[node])
	}
	return j.net.SetShape(ctx, node, s)
}

// process applies a process fault. Restarts and leaves return at once:
// the node comes up or leaves while the schedule goes on.
func (j *Injector) process(ctx context.Context, f Fault, undo bool) error {
	if j.cl == nil {
		return errors.New("no cluster")
	}
	if !undo && (f.Kind == KindKill || f.Kind == KindPause || f.Kind == KindLeave) {
		if !j.cl.WaitVoting(ctx, f.Node, 20*time.Second) {
			return ErrSkipped
		}
	}
	switch {
	case f.Kind == KindKill && !undo:
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return j.cl.Kill(kctx, f.Node)
	case f.Kind == KindPause && !undo:
		return j.cl.Pause(f.Node)
	case f.Kind == KindPause && undo:
		return j.cl.Resume(f.Node)
	case f.Kind == KindLeave && !undo:
		return j.cl.Leave(f.Node)
	case f.Kind == KindJoin && undo:
		// The spare is retired for good: an operator forgets it, or it
		// would stay in the configuration as a dead voter.
		return j.cl.Retire(ctx, f.Node)
	default: // undo of kill or leave, start of join
		return j.cl.Restart(f.Node)
	}
}

func (j *Injector) clock(ctx context.Context, node string, jump time.Duration) error {
	if j.ClockJump == nil {
		return errors.New("clock jumps are not implemented: set Injector.ClockJump")
	}
	return j.ClockJump(ctx, node, jump)
}
