package doc

import (
	"hash/maphash"
	"strings"
	"unsafe"
)

// table is one partition's index from top-level key to cell: open
// addressing with linear probing over slots that keep each key's hash
// beside its cell.
//
// It replaces a Go map for the lookup every change makes. A copy applies
// every commit, and between two changes to one partition a busy node
// touches megabytes of other memory, so each lookup starts from cold
// caches; what it costs is then the chain of dependent loads. A Go map
// with a string key goes from the map through its directory, table and
// group to the key's bytes, and then to the value; here the slots are one
// load from the partition, a slot's hash rules out every other key, and
// the cell holds the key's bytes, so a lookup that finds its key misses
// twice: once in the slots, once in the cell.
type table struct {
	slots []tslot // a power of two long, or empty
	n     int     // cells held
}

type tslot struct {
	hash uint64 // 0 marks an empty slot; keyHash never returns 0
	c    *cell
}

// cell is a top-level key's place in its partition: the table holds it
// from the key's first write until the key is removed, and a change to the
// key stores a new entry in it, so changing a key's value moves nothing in
// the table.
//
// The key's version lives here rather than in the entry: an entry is
// allocated by every change, a cell once per key, so the commonest change
// (an UPDATE of a top-level key) allocates no more than it did before
// versions were kept.
type cell struct {
	key string
	e   *entry
	ver uint64
}

var tableSeed = maphash.MakeSeed()

func keyHash(key string) uint64 {
	return maphash.String(tableSeed, key) | 1<<63
}

// get returns the cell of key, whose hash is h, or nil.
func (t *table) get(key string, h uint64) *cell {
	if i := t.find(key, h); i >= 0 {
		return t.slots[i].c
	}
	return nil
}

// find returns the slot of key, whose hash is h, or -1.
func (t *table) find(key string, h uint64) int {
	if len(t.slots) == 0 {
		return -1
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch {
		case s.hash == 0:
			return -1
		case s.hash == h && s.c.key == key:
			return int(i)
		}
	}
}

// add inserts c, whose key has hash h and is not in the table.
func (t *table) add(c *cell, h uint64) {
	// At most three quarters full, so every probe meets an empty slot.
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	t.put(c, h)
	t.n++
}

func (t *table) put(c *cell, h uint64) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].hash != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = tslot{hash: h, c: c}
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]tslot, max(8, 2*len(old)))
	for _, s := range old {
		if s.hash != 0 {
			t.put(s.c, s.hash)
		}
	}
}

// remove deletes key, whose hash is h, if it is present. Later slots of
// its probe run move back into the gap, so no probe ever stops short of
// its key and nothing marks the dead.
func (t *table) remove(key string, h uint64) {
	at := t.find(key, h)
	if at < 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := uint64(at)
	for j := i; ; {
		j = (j + 1) & mask
		if t.slots[j].hash == 0 {
			break
		}
		// The slot at j may fill the gap at i unless its home lies
		// cyclically in (i, j]: it would then be found before the gap.
		home := t.slots[j].hash & mask
		if (j-home)&mask < (j-i)&mask {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = tslot{}
	t.n--
}

// all yields every cell, in no order.
func (t *table) all(yield func(*cell) bool) {
	for _, s := range t.slots {
		if s.hash != 0 && !yield(s.c) {
			return
		}
	}
}

// newCell returns a cell for a copy of key, which may alias a receive
// buffer. A short key's bytes share the cell's allocation, so the lookup
// that compares them loads nothing more.
// The sizes fill the allocator's classes of 48, 64, 96 and 112 bytes.
func newCell(key string, e *entry, ver uint64) *cell {
	var c *cell
	switch n := len(key); {
	case n <= 16:
		c = packCell[[16]byte](key)
	case n <= 32:
		c = packCell[[32]byte](key)
	case n <= 64:
		c = packCell[[64]byte](key)
	case n <= 80:
		c = packCell[[80]byte](key)
	default:
		c = &cell{key: strings.Clone(key)}
	}
	c.e, c.ver = e, ver
	return c
}

type packedCell[B any] struct {
	cell
	b B
}

func packCell[B any](key string) *cell {
	p := new(packedCell[B])
	b := unsafe.Slice((*byte)(unsafe.Pointer(&p.b)), unsafe.Sizeof(p.b))
	n := copy(b, key)
	p.key = unsafe.String(&b[0], n)
	return &p.cell
}
