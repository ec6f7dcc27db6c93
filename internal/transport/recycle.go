package transport

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A one-way request whose handler keeps its payload past its return
// (Keep) pins the read block the payload lies in: the reader starts a new
// block and leaves the old one to the garbage collector. Under a steady
// stream of kept payloads (the node's engine batches) that is a new
// 64 KiB block every few hundred messages. Hold keeps a payload the same
// way but says when it is no longer used: once every payload held in a
// block has been released, and nothing else pinned it, the block goes
// back to its connection, whose reader starts its next block there.

// Hold is a one-way request's payload kept past its handler, until
// Release (Request.Hold). The zero Hold holds nothing.
type Hold struct{ b *heldRead }

// Release lets go of the payload: it must not be used afterwards, nor
// anything aliasing it. Call it once.
func (h Hold) Release() {
	if h.b != nil {
		h.b.unref()
	}
}

// heldRead is a read block that held payloads of one-way requests were
// read into. refs counts the Holds in it and, while the reader still
// reads into it, one for the reader.
type heldRead struct {
	id    uint64 // wire.Reader.Block's
	buf   []byte
	refs  atomic.Int32
	dirty atomic.Bool // something other than a Hold pinned it: never reused
	free  *freeBlocks
}

func (b *heldRead) unref() {
	if b.refs.Add(-1) == 0 && !b.dirty.Load() {
		b.free.put(b.buf)
	}
}

// freeBlocks keeps blocks that held payloads since released, for the
// connection's reader to start its next blocks in: a block of a peer's
// 64 KiB default, or one the reader sized to a larger frame.
type freeBlocks struct {
	mu    sync.Mutex
	bufs  [][]byte // each at its full capacity
	bytes int
}

// zeroReleased zeroes a block when it is released, in test binaries: a
// payload used after its Release then reads zeros at once, rather than
// whatever a later frame brings once the block is read into again. (In
// production the reader overwrites it anyway; zeroing cost about 2% of a
// server's CPU under one-way writes.)
var zeroReleased = testing.Testing()

// A connection keeps up to maxFreeBytes of free blocks, none larger than
// maxFreeBlock.
const (
	maxFreeBytes = 1 << 20
	maxFreeBlock = 512 << 10
)

func (f *freeBlocks) put(b []byte) {
	b = b[:cap(b)]
	if len(b) > maxFreeBlock {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bytes+len(b) > maxFreeBytes {
		return
	}
	if zeroReleased {
		clear(b)
	}
	f.bufs = append(f.bufs, b)
	f.bytes += len(b)
}

// get returns a free block of size bytes, or nil (wire.Reader.SetAlloc):
// the smallest free one that has room.
func (f *freeBlocks) get(size int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	best := -1
	for i, b := range f.bufs {
		if len(b) >= size && (best < 0 || len(b) < len(f.bufs[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := f.bufs[best]
	last := len(f.bufs) - 1
	f.bufs[best], f.bufs[last] = f.bufs[last], nil
	f.bufs = f.bufs[:last]
	f.bytes -= len(b)
	return b[:size]
}

// holdRead takes a Hold on the reader's current block. Reader goroutine
// only.
func (c *Conn) holdRead() Hold {
	id, _ := c.rd.Block()
	b := c.held
	if b == nil || b.id != id {
		c.leaveHeld()
		b = &heldRead{id: id, buf: c.rd.BlockBytes(), free: &c.freeBlk}
		b.refs.Store(1) // the reader's
		b.dirty.Store(c.pinnedOther == id+1)
		c.held = b
	}
	b.refs.Add(1)
	return Hold{b: b}
}

// pinOther notes that the reader's current block is pinned for something
// other than a Hold (a call's payload, a reply handed on, Keep): it is
// then never reused. Reader goroutine only.
func (c *Conn) pinOther() {
	id, _ := c.rd.Block()
	c.pinnedOther = id + 1
	if c.held != nil && c.held.id == id {
		c.held.dirty.Store(true)
	}
}

// leaveHeld drops the reader's reference to the block it held payloads
// in, once it reads into another. Reader goroutine only.
func (c *Conn) leaveHeld() {
	if c.held != nil {
		c.held.unref()
		c.held = nil
	}
}
