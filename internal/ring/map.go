package ring

import (
	"encoding/binary"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Map is one immutable partition map. It is safe for concurrent use; swap
// whole maps (for example through an atomic.Pointer) on membership changes.
type Map struct {
	cfg     config
	version uint64
	members []Member // servers, sorted by ID
	owners  []int32  // partition → index into members, -1 when none
	// replicas[repOff[p]:repOff[p+1]] are partition p's replicas, in order.
	replicas []Member
	repOff   []int32
}

// Version identifies the map: a 64-bit xxhash of the placement options and
// the sorted server members' (ID, Incarnation). Equal versions mean the same
// inputs and therefore the same map; clients joining or leaving do not change
// it. It is not a counter and not ordered: a newer map can have a smaller
// version, and a member set that returns gives the version it had before.
// The partition engine must derive monotonic per-partition epochs itself
// (for example, last epoch + 1 on each owner change), using Version only to
// tell whether two nodes are looking at the same map.
func (m *Map) Version() uint64 { return m.version }

// Partitions returns the partition count.
func (m *Map) Partitions() int { return len(m.owners) }

// Members returns the server members the map was built from, sorted by ID.
// The slice is shared: do not modify it.
func (m *Map) Members() []Member { return m.members }

// Partition returns key's partition. It does not allocate.
func (m *Map) Partition(key string) int {
	return int(m.cfg.partitioner.Hash(key) % uint64(len(m.owners)))
}

// Owner returns partition p's owner; false when there are no server members
// or p is out of range. It does not allocate.
func (m *Map) Owner(p int) (Member, bool) {
	if p < 0 || p >= len(m.owners) {
		return Member{}, false
	}
	i := m.owners[p]
	if i < 0 {
		return Member{}, false
	}
	return m.members[i], true
}

// OwnerOfKey is Owner(Partition(key)).
func (m *Map) OwnerOfKey(key string) (Member, bool) { return m.Owner(m.Partition(key)) }

// Replicas returns partition p's replicas in order of preference, excluding
// the owner; fewer than the configured count when the cluster is smaller. The
// slice is shared: do not modify it. It does not allocate.
func (m *Map) Replicas(p int) []Member {
	if p < 0 || p >= len(m.owners) {
		return nil
	}
	return m.replicas[m.repOff[p]:m.repOff[p+1]:m.repOff[p+1]]
}

// Owned returns the partitions id owns, in increasing order.
func (m *Map) Owned(id string) []int {
	var out []int
	for p := range m.owners {
		if o, ok := m.Owner(p); ok && o.ID == id {
			out = append(out, p)
		}
	}
	return out
}

func (m *Map) computeVersion() uint64 {
	d := xxhash.New()
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(m.cfg.partitions))
	b = binary.BigEndian.AppendUint32(b, uint32(m.cfg.vnodes))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.cfg.load))
	b = binary.BigEndian.AppendUint32(b, uint32(m.cfg.replicas))
	for _, s := range m.members {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.ID)))
		b = append(b, s.ID...)
		b = binary.BigEndian.AppendUint64(b, s.Incarnation)
	}
	_, _ = d.Write(b)
	return d.Sum64()
}

// MarshalBinary returns a canonical encoding of the whole map (version,
// members, owners, replicas): two maps are equal exactly when their
// encodings are. It is for comparing and debugging, not a wire format.
func (m *Map) MarshalBinary() ([]byte, error) {
	b := []byte("FRM1")
	b = binary.BigEndian.AppendUint64(b, m.version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.members)))
	for _, s := range m.members {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.ID)))
		b = append(b, s.ID...)
		b = binary.BigEndian.AppendUint64(b, s.Incarnation)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.owners)))
	for p, o := range m.owners {
		b = binary.BigEndian.AppendUint32(b, uint32(o))
		reps := m.Replicas(p)
		b = append(b, byte(len(reps)))
		for _, r := range reps {
			b = binary.BigEndian.AppendUint32(b, uint32(len(r.ID)))
			b = append(b, r.ID...)
		}
	}
	return b, nil
}

// Move is one partition whose owner changed between two maps. From or To is
// empty when the partition had or has no owner.
type Move struct {
	Partition int
	From, To  string
}

// Diff lists the partitions whose owner differs between old and new, in
// partition order. A nil old map counts as one with no owners. Both maps must
// have the same partition count; otherwise every partition of new is listed.
func Diff(old, new *Map) []Move {
	var moves []Move
	for p := range new.owners {
		var from string
		if old != nil && len(old.owners) == len(new.owners) {
			if o, ok := old.Owner(p); ok {
				from = o.ID
			}
		}
		var to string
		if o, ok := new.Owner(p); ok {
			to = o.ID
		}
		if from != to {
			moves = append(moves, Move{Partition: p, From: from, To: to})
		}
	}
	return moves
}
