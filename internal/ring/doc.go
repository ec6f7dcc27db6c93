// Package ring owns the partition map: which partition a key belongs to, and
// which server member owns each partition, with an ordered list of replicas.
//
// A [Ring] holds the validated options (partition count, virtual nodes per
// member, load bound, replica count, partitioner). [Ring.Build] turns a member
// set into an immutable [Map]. Build is a pure function of the member set and
// the options: every node that sees the same members computes a
// byte-identical map (see [Map.MarshalBinary]), whatever the order in which it
// learned about them. Nothing here does I/O or starts goroutines.
//
// Placement uses github.com/buraksezer/consistent: each member is hashed onto
// a ring at VNodes points, each partition is hashed onto the same ring, and a
// partition belongs to the first member clockwise whose load is below the
// bound ceil(floor(Partitions/N)*Load). The defaults (see [DefaultLoad]) are
// chosen from measurements reported in docs/membership-ring.md so that adding
// the N-th member moves about 1/N of the partitions and nothing moves between
// the members that were already there.
//
// Lookups on the hot path ([Map.Partition], [Map.Owner], [Map.OwnerOfKey])
// index precomputed slices and do not allocate.
//
// [Map.Version] names the member set and options. It is a hash, not a
// counter: equal versions mean identical maps, but a later map can have a
// smaller version. Monotonic per-partition epochs are the partition engine's
// job (see [Map.Version]).
package ring
