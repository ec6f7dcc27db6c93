package transport

// slotTable maps call ids to what waits on them: on the calling side the
// calls awaiting an answer (Conn.pending, under Conn.pmu), on the serving
// side the requests that outlived their handler call (Conn.open, under
// Conn.omu). A caller hands ids out in sequence, so an entry almost always
// finds its own slot, indexed by the id's low bits, free: lookups are an
// index and a compare instead of a map operation. An entry whose slot is
// still held by an older one goes to the overflow map.
type slotTable[T any] struct {
	slots []slot[T]
	over  map[uint64]*T
	n     int
}

type slot[T any] struct {
	id uint64
	p  *T
}

// pendingTable holds a connection's calls awaiting an answer.
type pendingTable = slotTable[pending]

const tableSlots = 1024 // power of two; 16 KiB per table, made on first use

func (t *slotTable[T]) put(id uint64, p *T) {
	if t.slots == nil {
		t.slots = make([]slot[T], tableSlots)
	}
	t.n++
	s := &t.slots[id&(tableSlots-1)]
	if s.p == nil {
		s.id, s.p = id, p
		return
	}
	if t.over == nil {
		t.over = make(map[uint64]*T)
	}
	t.over[id] = p
}

// take removes and returns the entry with this id, or nil.
func (t *slotTable[T]) take(id uint64) *T {
	if t.slots == nil {
		return nil
	}
	s := &t.slots[id&(tableSlots-1)]
	if s.p != nil && s.id == id {
		p := s.p
		s.p = nil
		t.n--
		return p
	}
	if p, ok := t.over[id]; ok {
		delete(t.over, id)
		t.n--
		return p
	}
	return nil
}

// get returns the entry with this id without removing it, or nil.
func (t *slotTable[T]) get(id uint64) *T {
	if t.slots == nil {
		return nil
	}
	if s := &t.slots[id&(tableSlots-1)]; s.p != nil && s.id == id {
		return s.p
	}
	return t.over[id]
}

type idEntry[T any] struct {
	id uint64
	p  *T
}

// takeIf removes and returns the entries that match.
func (t *slotTable[T]) takeIf(match func(*T) bool) []idEntry[T] {
	var out []idEntry[T]
	for i := range t.slots {
		if s := &t.slots[i]; s.p != nil && match(s.p) {
			out = append(out, idEntry[T]{s.id, s.p})
			s.p = nil
			t.n--
		}
	}
	for id, p := range t.over {
		if match(p) {
			out = append(out, idEntry[T]{id, p})
			delete(t.over, id)
			t.n--
		}
	}
	return out
}

// drain removes and returns every entry.
func (t *slotTable[T]) drain() []*T {
	out := make([]*T, 0, t.n)
	for i := range t.slots {
		if p := t.slots[i].p; p != nil {
			out = append(out, p)
			t.slots[i].p = nil
		}
	}
	for id, p := range t.over {
		out = append(out, p)
		delete(t.over, id)
	}
	t.n = 0
	return out
}
