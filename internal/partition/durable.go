package partition

import (
	"fmt"
	"slices"
)

// Durability (docs/storage.md). The engine does no I/O: with WithDurable,
// each Ready also lists what changed in every partition's copy since the
// last one (entries appended, a snapshot that replaced the log, the epochs
// the copy promised and holds) and the configuration, and the driver makes
// them durable before it sends the round's messages or answers its
// completions. So every promise, ack and read confirmation a node sends is
// backed by its disk (rules 1 and 2 of docs/storage.md), and a node that
// restarts from its disk (Restore, RestoreConfig) is the voter it was.

// WithDurable makes the engine report, in each Ready, what the driver must
// keep on disk (Ready.Durable, Ready.Config).
func WithDurable() Option { return optionFunc(func(c *config) { c.durable = true }) }

// PartMeta is what a partition's copy must remember across a restart
// besides its log: the highest epoch it accepted or promised (rule 3),
// whether that epoch has started, and the epoch whose history its log is a
// prefix of, from which offset (its position, rule 5).
type PartMeta struct {
	Accepted Epoch  `msgpack:"a"`
	Started  bool   `msgpack:"s"`
	LogEpoch Epoch  `msgpack:"e"`
	LogStart uint64 `msgpack:"o"`
}

// Snapshot is a partition's copy at offset Base: its state, and the epoch
// history of the offsets up to Base (the log's runs; rule 8).
type Snapshot struct {
	Base      uint64 `msgpack:"b"`
	BaseEpoch Epoch  `msgpack:"e"`
	Runs      []Run  `msgpack:"r"`
	State     []byte `msgpack:"s"`
}

// Durable is one partition's changes in a round. The driver writes them in
// this order: the snapshot (which replaces everything the partition's log
// held), the entries after it, then the meta; what a crash keeps of them
// is a prefix in that order, which Restore accepts.
type Durable struct {
	Partition int
	// Snapshot, when set, is the copy at its Base: the log was replaced by
	// a snapshot from a peer, or it has grown past the history bound and
	// the driver may drop the entries the snapshot covers (compaction).
	Snapshot *Snapshot
	// Entries were appended after the snapshot, or after the last round's.
	// They alias the engine's log: write them before Advance.
	Entries []Entry
	// Meta is set when it changed.
	Meta *PartMeta
	// Err says why the engine could not take the snapshot the disk needs
	// (its State failed to encode); the driver reports it. The entries, if
	// the log still had them, are in Entries, and the engine tries again.
	Err error
}

// Config is what a node must remember of the configuration (rule 9): the
// voters it knows, whether it has heard the configuration (its cluster has
// formed), and the incarnation it holds its vote in.
type Config struct {
	Inc    uint64  `msgpack:"i"`
	Heard  bool    `msgpack:"h"`
	Voters []Voter `msgpack:"v"`
	// Cluster names the cluster, and Kin its other names (rule 9,
	// cluster identity).
	Cluster ClusterID   `msgpack:"c,omitempty"`
	Kin     []ClusterID `msgpack:"k,omitempty"`
}

// touch notes that pt's copy changed in a way the disk must learn.
func (e *Engine) touch(pt *part) {
	if e.cfg.durable && !pt.durDirty {
		pt.durDirty = true
		e.durDirty = append(e.durDirty, pt.p)
	}
}

// votersChanged notes a change to the configuration.
func (e *Engine) votersChanged() {
	e.votersPresent = -1
	e.configVer++
}

func (pt *part) meta() PartMeta {
	return PartMeta{Accepted: pt.accepted, Started: pt.started, LogEpoch: pt.logEpoch, LogStart: pt.logStart}
}

// durablePending reports whether the next Ready has durable changes.
func (e *Engine) durablePending() bool {
	return e.cfg.durable && (len(e.durDirty) > 0 || e.configDirty())
}

func (e *Engine) configDirty() bool {
	return e.configVer != e.dur.configVer || e.heardConfig != e.dur.heard || e.inc != e.dur.inc
}

// durableReady fills the Ready's durable part.
func (e *Engine) durableReady() {
	if !e.cfg.durable {
		return
	}
	for _, p := range e.durDirty {
		pt := e.parts[p]
		pt.durDirty = false
		d := Durable{Partition: p}
		last := pt.log.last()
		restored := pt.durState
		if pt.durStateAt != last {
			restored = nil // entries followed the restore this round
		}
		pt.durState = nil
		switch {
		case pt.durReset || pt.durOff < pt.log.base || pt.durBytes >= max(min(e.cfg.historyBytes, diskTailFloor), pt.durSnap):
			// The log was replaced, or lost entries the disk has not
			// seen to the history bound, or the disk's tail has grown as
			// large as the state (and past a floor): a snapshot of the
			// copy as it is now covers all. Bounding the tail by the
			// state keeps the disk within about twice the state, and
			// what snapshots write within about what the writes do: a
			// bound in entries made a large partition written in small
			// writes write its whole state again every 10,000 of them.
			// And a restart restores states rather than replaying
			// entries: with the tail bounded by the history's 2 MiB
			// instead, 100 MB of state in 271 partitions never took a
			// snapshot, and a restart replayed all 1,000,000 writes.
			// A partition restored this round from a whole-state reply
			// takes the reply's bytes: encoding 1 GB of restored state
			// again showed as 0.85 s of copying in a join's profile.
			state, err := restored, error(nil)
			if state == nil {
				state, err = e.st.Snapshot(p)
			}
			if err != nil {
				// The state cannot encode itself (it never fails for the
				// document store): keep the entries instead, if the log
				// still has them, and try again next round.
				d.Err = fmt.Errorf("snapshot of partition %d for the disk: %w", p, err)
				e.touch(pt)
				if pt.durReset || pt.durOff < pt.log.base {
					e.rd.Durable = append(e.rd.Durable, d)
					continue
				}
				d.Entries = pt.log.appendRange(e.durEntries(int(last-pt.durOff)), pt.durOff+1, last)
				pt.durBytes += diskEntryBytes(d.Entries)
				break
			}
			d.Snapshot = &Snapshot{Base: last, BaseEpoch: pt.log.lastEpoch(), Runs: slices.Clone(pt.log.runs), State: state}
			pt.durReset, pt.durBytes, pt.durSnap = false, 0, len(state)
		case pt.durOff < last:
			d.Entries = pt.log.appendRange(e.durEntries(int(last-pt.durOff)), pt.durOff+1, last)
			pt.durBytes += diskEntryBytes(d.Entries)
		}
		pt.durOff = last
		if m := pt.meta(); m != pt.durMeta {
			pt.durMeta = m
			d.Meta = &pt.durMeta
		}
		if d.Snapshot != nil || len(d.Entries) > 0 || d.Meta != nil || d.Err != nil {
			e.rd.Durable = append(e.rd.Durable, d)
		}
	}
	e.durDirty = e.durDirty[:0]
	if e.configDirty() {
		e.dur.configVer, e.dur.heard, e.dur.inc = e.configVer, e.heardConfig, e.inc
		e.rd.Config = &Config{Inc: e.inc, Heard: e.heardConfig, Voters: e.Voters(), Cluster: e.cluster, Kin: e.kinList()}
	}
}

// diskTailFloor is the least tail, in bytes, that makes a snapshot for
// the disk (a small partition written often would otherwise write its
// whole state every few writes). The history bound lowers it (tests).
const diskTailFloor = 64 << 10

// diskEntryOverhead approximates what a log record costs on disk beyond
// its key and value (frame, partition, offset, epoch).
const diskEntryOverhead = 32

// diskEntryBytes is what entries take in the disk's log, about.
func diskEntryBytes(es []Entry) int {
	n := 0
	for i := range es {
		n += len(es[i].Key) + len(es[i].Value) + diskEntryOverhead
	}
	return n
}

// SnapshotDisk makes the next Ready snapshot, for the disk, every
// partition whose disk log has entries past its snapshot: a server that
// closes cleanly leaves states to restore, not entries to replay (a
// restart loaded 1,000,000 entries in 2.2 s).
func (e *Engine) SnapshotDisk() {
	if !e.cfg.durable {
		return
	}
	for _, pt := range e.parts {
		if pt.durBytes > 0 || pt.durOff < pt.log.last() {
			pt.durReset = true
			e.touch(pt)
		}
	}
}

// durEntries returns room for n entries, reused across rounds.
func (e *Engine) durEntries(n int) []Entry {
	return e.out.entrySlice(n)[:0]
}

// Restore loads partition p's copy from the disk, before the engine's first
// SetMap: the snapshot (nil if none), the entries after it, and the meta
// (nil if none was written). partitions is the ring's partition count. What
// a crash left is taken as it is: entries whose meta did not reach the disk
// raise the log's epoch and the accepted one to theirs (an entry of an
// epoch means the copy accepted it and it started).
func (e *Engine) Restore(partitions, p int, snap *Snapshot, entries []Entry, meta *PartMeta) error {
	if e.m != nil {
		return fmt.Errorf("%w: Restore after SetMap", ErrInvalidOption)
	}
	if err := e.initParts(partitions); err != nil {
		return err
	}
	if p < 0 || p >= len(e.parts) {
		return fmt.Errorf("%w: partition %d out of range", ErrInvalidOption, p)
	}
	pt := e.parts[p]
	if snap != nil {
		if err := e.st.Restore(p, snap.State); err != nil {
			return fmt.Errorf("partition %d: restore its snapshot at offset %d: %w", p, snap.Base, err)
		}
		pt.log.reset(snap.Base, snap.BaseEpoch, snap.Runs)
	}
	if err := validEntries(entries, pt.log.last()+1); err != nil {
		return fmt.Errorf("partition %d: %w", p, err)
	}
	for _, ent := range entries {
		if ent.Epoch.Less(pt.log.lastEpoch()) {
			return fmt.Errorf("partition %d: entry %d of epoch %v after epoch %v", p, ent.Offset, ent.Epoch, pt.log.lastEpoch())
		}
		ent = pt.log.append(ent, e.cfg.historyMax, e.cfg.historyBytes)
		e.st.Apply(p, ent)
	}
	if meta != nil {
		pt.accepted, pt.started, pt.logEpoch, pt.logStart = meta.Accepted, meta.Started, meta.LogEpoch, meta.LogStart
	}
	if last := pt.log.lastEpoch(); pt.logEpoch.Less(last) || pt.logStart > pt.log.last() {
		// The meta is newer than the log: a crash while a snapshot
		// replaced the log kept the old one. Claim only what the log holds.
		lo, _, _ := pt.log.span(last)
		pt.logEpoch, pt.logStart = last, max(lo, 1)-1
	}
	if pt.accepted.Less(pt.logEpoch) {
		pt.accepted, pt.started = pt.logEpoch, true
	}
	pt.durOff, pt.durMeta, pt.durBytes = pt.log.last(), pt.meta(), diskEntryBytes(entries)
	if snap != nil {
		pt.durSnap = len(snap.State)
	}
	if meta == nil || *meta != pt.durMeta {
		e.touch(pt) // write back what the crash left out
	}
	return nil
}

// RestoreConfig loads the configuration from the disk, before the engine's
// first SetMap. A node whose disk holds every promise and ack it sent (each
// was on disk before it left, docs/storage.md rule 4) continues its vote:
// its new incarnation takes its previous one's entry at once, where a node
// that restarts with nothing is a learner until it has caught up and
// recovered its promises (rule 9). Its cluster has formed if the
// configuration holds a confirmed entry: it never founds a new one. A
// configuration of guesses (a cluster still forming) is not restored.
func (e *Engine) RestoreConfig(c Config) error {
	if e.m != nil {
		return fmt.Errorf("%w: RestoreConfig after SetMap", ErrInvalidOption)
	}
	e.dur.inc = c.Inc
	if !slices.ContainsFunc(c.Voters, Voter.confirmed) {
		// The cluster was still forming: its entries are guesses from
		// maps, and the node takes new ones from its maps as any forming
		// node does (its guesses about restarted servers would name
		// incarnations that no longer answer).
		return nil
	}
	clear(e.voters)
	for _, v := range c.Voters {
		if v.ID != "" {
			e.voters[v.ID] = v
		}
	}
	e.votersChanged()
	e.heardConfig = true
	e.cluster = c.Cluster
	for _, k := range c.Kin {
		if e.kin == nil {
			e.kin = map[ClusterID]struct{}{}
		}
		e.kin[k] = struct{}{}
	}
	if e.cluster.IsZero() {
		// Written before clusters had names: a formed cluster must have
		// one (a nameless server takes the first it hears). Its servers
		// each take their own and converge on the lowest (rule 9).
		e.cluster = ClusterID{Founder: e.id, Inc: c.Inc}
	}
	if v, ok := e.voters[e.id]; ok && v.Inc == c.Inc && v.confirmed() {
		e.continues = c.Inc
	}
	e.dur.configVer, e.dur.heard = e.configVer, e.heardConfig
	return nil
}

// continueVote moves this node's entry to its new incarnation inc when it
// continues the vote of the one its disk was written by (RestoreConfig).
func (e *Engine) continueVote(inc uint64) {
	prev := e.continues
	e.continues = 0
	if v, ok := e.voters[e.id]; ok && v.Inc == prev && v.confirmed() && inc > prev {
		e.voters[e.id] = Voter{ID: e.id, Inc: inc}
		e.votersChanged()
		e.quorumKnown = false
	}
}

func (e *Engine) initParts(n int) error {
	if e.parts == nil {
		if n < 1 {
			return fmt.Errorf("%w: %d partitions", ErrInvalidOption, n)
		}
		e.parts = make([]*part, n)
		for p := range e.parts {
			e.parts[p] = &part{p: p}
		}
		return nil
	}
	if n != len(e.parts) {
		return fmt.Errorf("%w: %d partitions, engine has %d", ErrInvalidOption, n, len(e.parts))
	}
	return nil
}
