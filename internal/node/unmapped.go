package node

import (
	"strings"
	"time"

	"github.com/fero-go/fero/internal/partition"
)

// maxUnmapped bounds the proposals a node keeps before its engine's first
// map; beyond it, a proposal is refused at once (partition.ErrNoMap).
const maxUnmapped = 4096

// unmapped keeps the proposals (writes and reads) that reach the engine
// before it has its first ring map: a node that has just started, whose
// membership has not produced a map yet, holds them rather than answer
// "no ring map yet" to a caller that asked a few milliseconds too early.
// The first map proposes them in the order they came; a tick refuses
// those whose deadline passed first (the caller's, or the write timeout
// from when it came), definitely: none reached the engine. Under engMu.
type unmapped struct {
	held []heldProposal
}

type heldProposal struct {
	p     proposal
	until time.Time
}

// hold keeps p, which came at now; false when the queue is full.
func (u *unmapped) hold(p proposal, now time.Time) bool {
	if len(u.held) >= maxUnmapped {
		return false
	}
	until := p.req.Deadline
	if until.IsZero() {
		until = now.Add(partition.DefaultWriteTimeout)
	}
	p.req.Token = 0 // a new one when it is proposed again
	u.held = append(u.held, heldProposal{p: p, until: until})
	return true
}

// take returns every held proposal, oldest first, and empties the queue.
func (u *unmapped) take() []proposal {
	ps := make([]proposal, len(u.held))
	for i, h := range u.held {
		ps[i] = h.p
	}
	u.held = nil
	return ps
}

// expired removes and returns the held proposals whose deadline is
// at or before now.
func (u *unmapped) expired(now time.Time) []proposal {
	var out []proposal
	kept := u.held[:0]
	for _, h := range u.held {
		if now.Before(h.until) {
			kept = append(kept, h)
		} else {
			out = append(out, h.p)
		}
	}
	clear(u.held[len(kept):])
	u.held = kept
	return out
}

// refuse answers a proposal that never reached the engine with err.
func (n *Node) refuse(p proposal, err error) {
	switch {
	case p.read != nil:
		p.read(nil, err)
	case p.done != nil:
		n.complete(waiter{done: p.done, began: p.began, wait: p.req.Wait}, partition.Completion{Err: err})
	}
}

// formingWarnEvery is how often a server that cannot form a cluster says
// so at WARN.
const formingWarnEvery = 5 * time.Second

// warnForming logs, every formingWarnEvery, why this server has formed no
// cluster yet (partition.Engine.Forming) and what its discovery found:
// each seed and why it did not answer, the last DNS lookup. Without it a
// server whose DNS failed, or whose seed is down, waited in silence (issue
// 43). Under engMu.
func (n *Node) warnForming(now time.Time) {
	why := n.eng.Forming()
	n.ms.SetEager(why != "")
	if why == "" || now.Sub(n.notes.formingWarned) < formingWarnEvery {
		return
	}
	n.notes.formingWarned = now
	n.logger.Warn("fero: node: no cluster formed yet; this server takes no writes and is not ready until it forms one or joins a formed one: "+why,
		n.discoveryAttrs()...)
}

// discoveryAttrs describes, for a log line, what the node's discovery
// found: its seeds with why each did not answer, the last DNS lookup.
func (n *Node) discoveryAttrs() []any {
	var attrs []any
	if seeds := n.ms.Seeds(); len(seeds) > 0 {
		ss := make([]string, len(seeds))
		for i, s := range seeds {
			ss[i] = s.String()
		}
		attrs = append(attrs, "seeds", strings.Join(ss, ", "))
	}
	if d, ok := n.ms.DNS(); ok {
		attrs = append(attrs, "dns", d.String())
	}
	return attrs
}
