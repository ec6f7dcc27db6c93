package transport

// pendingTable maps call ids to calls awaiting an answer. Ids are handed
// out in sequence, so a call almost always finds its own slot, indexed by
// the id's low bits, free: lookups are an index and a compare instead of a
// map operation. A call whose slot is still held by an older one goes to
// the overflow map. Callers hold Conn.pmu.
type pendingTable struct {
	slots []pendingSlot
	over  map[uint64]*pending
	n     int
}

type pendingSlot struct {
	id uint64
	p  *pending
}

const pendingSlots = 1024 // power of two; 16 KiB per connection, made on first call

func (t *pendingTable) put(id uint64, p *pending) {
	if t.slots == nil {
		t.slots = make([]pendingSlot, pendingSlots)
	}
	t.n++
	s := &t.slots[id&(pendingSlots-1)]
	if s.p == nil {
		s.id, s.p = id, p
		return
	}
	if t.over == nil {
		t.over = make(map[uint64]*pending)
	}
	t.over[id] = p
}

// take removes and returns the call with this id, or nil.
func (t *pendingTable) take(id uint64) *pending {
	if t.slots == nil {
		return nil
	}
	s := &t.slots[id&(pendingSlots-1)]
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

// get returns the call with this id without removing it, or nil.
func (t *pendingTable) get(id uint64) *pending {
	if t.slots == nil {
		return nil
	}
	if s := &t.slots[id&(pendingSlots-1)]; s.p != nil && s.id == id {
		return s.p
	}
	return t.over[id]
}

type idPending struct {
	id uint64
	p  *pending
}

// takeIf removes and returns the calls that match.
func (t *pendingTable) takeIf(match func(*pending) bool) []idPending {
	var out []idPending
	for i := range t.slots {
		if s := &t.slots[i]; s.p != nil && match(s.p) {
			out = append(out, idPending{s.id, s.p})
			s.p = nil
			t.n--
		}
	}
	for id, p := range t.over {
		if match(p) {
			out = append(out, idPending{id, p})
			delete(t.over, id)
			t.n--
		}
	}
	return out
}

// drain removes and returns every call.
func (t *pendingTable) drain() []*pending {
	out := make([]*pending, 0, t.n)
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
