// Package seqtab keeps values under the sequence numbers it hands out, for
// the in-flight tables of a hot path: writes waiting for their completion,
// forwarded writes waiting for their reply.
//
// Ids are consecutive and most values leave roughly in the order they came,
// so a [Table] is a ring of slots indexed by id - oldest id: adding, finding
// and removing cost an index, not a hash, and the oldest values (the first
// to time out) are at the front. A value that stays while later ones leave
// keeps the window open behind it; the table grows to span it, so callers
// bound how long a value may stay (a timeout).
package seqtab

import "iter"

// Table is a set of values keyed by the ids Add returns, 1, 2, 3, … (or
// n+1, n+2, … after StartAfter(n)).
// Its zero value is empty and ready. It is not safe for concurrent use.
type Table[T any] struct {
	slots []slot[T] // a ring; len is a power of two or 0
	head  int       // index of the slot of id base
	base  uint64    // the oldest id still spanned
	n     int       // ids spanned: base … base+n-1
	live  int       // values present
	next  uint64    // the id Add hands out next, minus one
}

type slot[T any] struct {
	v  T
	ok bool
}

// Add stores v and returns its id.
func (t *Table[T]) Add(v T) uint64 {
	t.next++
	if t.n == 0 {
		t.base, t.head = t.next, 0
	}
	if t.n == len(t.slots) {
		t.grow()
	}
	t.slots[(t.head+t.n)&(len(t.slots)-1)] = slot[T]{v: v, ok: true}
	t.n++
	t.live++
	return t.next
}

// StartAfter makes the next id Add hands out id+1. It panics unless the
// table is empty and has never handed out an id.
func (t *Table[T]) StartAfter(id uint64) {
	if t.next != 0 || t.n != 0 {
		panic("seqtab: StartAfter on a table in use")
	}
	t.next = id
}

func (t *Table[T]) grow() {
	size := max(2*len(t.slots), 64)
	s := make([]slot[T], size)
	for i := range t.n {
		s[i] = t.slots[(t.head+i)&(len(t.slots)-1)]
	}
	t.slots, t.head = s, 0
}

func (t *Table[T]) index(id uint64) (int, bool) {
	if id < t.base || id-t.base >= uint64(t.n) {
		return 0, false
	}
	i := (t.head + int(id-t.base)) & (len(t.slots) - 1)
	return i, t.slots[i].ok
}

// Get returns the value of id.
func (t *Table[T]) Get(id uint64) (T, bool) {
	i, ok := t.index(id)
	if !ok {
		var zero T
		return zero, false
	}
	return t.slots[i].v, true
}

// Take removes and returns the value of id.
func (t *Table[T]) Take(id uint64) (T, bool) {
	i, ok := t.index(id)
	if !ok {
		var zero T
		return zero, false
	}
	v := t.slots[i].v
	t.slots[i] = slot[T]{}
	t.live--
	t.trim()
	return v, true
}

// trim drops the empty slots at the front.
func (t *Table[T]) trim() {
	for t.n > 0 && !t.slots[t.head].ok {
		t.head = (t.head + 1) & (len(t.slots) - 1)
		t.base++
		t.n--
	}
}

// Len returns how many values the table holds.
func (t *Table[T]) Len() int { return t.live }

// Oldest returns the value with the smallest id.
func (t *Table[T]) Oldest() (id uint64, v T, ok bool) {
	if t.live == 0 {
		return 0, v, false
	}
	return t.base, t.slots[t.head].v, true
}

// All yields every value with its id, oldest first. The loop may Take the
// id it is given, and no other.
func (t *Table[T]) All() iter.Seq2[uint64, T] {
	return func(yield func(uint64, T) bool) {
		for id := t.base; id < t.base+uint64(t.n); id++ {
			if i, ok := t.index(id); ok && !yield(id, t.slots[i].v) {
				return
			}
		}
	}
}
