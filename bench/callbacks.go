package bench

// CallbackQueue is a growable first-in, first-out queue of reply
// callbacks, for a pipelined Conn whose server answers in request order
// (the echo, Redis): a request queues its callback, and the reader pops the
// oldest for each reply. It is not safe for concurrent use; the Conn locks
// around it. The zero value is empty and ready.
type CallbackQueue struct {
	buf  []func([]byte, error) // capacity a power of two
	head int                   // index of the oldest entry
	n    int                   // entries held
}

// Push adds f at the back.
func (q *CallbackQueue) Push(f func([]byte, error)) {
	if q.n == len(q.buf) {
		grown := make([]func([]byte, error), max(64, 2*len(q.buf)))
		// Unroll the wrapped contents to the front of the new buffer.
		k := copy(grown, q.buf[q.head:])
		copy(grown[k:], q.buf[:q.head])
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = f
	q.n++
}

// Pop removes and returns the oldest callback; ok is false when empty.
func (q *CallbackQueue) Pop() (f func([]byte, error), ok bool) {
	if q.n == 0 {
		return nil, false
	}
	f = q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return f, true
}

// Drain empties the queue, returning its callbacks oldest first.
func (q *CallbackQueue) Drain() []func([]byte, error) {
	out := make([]func([]byte, error), 0, q.n)
	for q.n > 0 {
		f, _ := q.Pop()
		out = append(out, f)
	}
	return out
}
