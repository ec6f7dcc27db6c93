package transport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type heldPayload struct {
	i    uint64
	p    []byte
	hold Hold
}

// TestHeldPayloadsIntactUntilReleased holds every one-way payload and
// releases each 1,000 messages later, checking it first: a held payload's
// block is never refilled before its release, and released blocks are
// read into again (what was released then reads as something else).
func TestHeldPayloadsIntactUntilReleased(t *testing.T) {
	var window, released []heldPayload // handlers run on the reader, one at a time
	var next uint64
	var bad bool
	mux := NewMux()
	mux.HandleFunc(1, func(r *Request) {
		window = append(window, heldPayload{i: next, p: r.Payload(), hold: r.Hold()})
		next++
		if len(window) > 1000 {
			h := window[0]
			window = window[1:]
			if want := numbered(h.i); !bad && !bytes.Equal(h.p, want) {
				bad = true
				t.Errorf("held message %d reads %x before its release, want %x", h.i, h.p[:min(len(h.p), 16)], want[:min(len(want), 16)])
			}
			h.hold.Release()
			released = append(released, h)
		}
	})
	const n = 20000 // about 3.5 MB: dozens of 64 KiB blocks
	sendNumbered(t, mux, n)
	require.Len(t, released, n-1000)
	for _, h := range window {
		require.Equal(t, numbered(h.i), h.p, "held message %d", h.i)
	}
	// Zeroing (test binaries) changes every released payload; one that
	// reads neither as itself nor as zeros lies in a block the reader
	// read later frames into.
	changed, reread := 0, 0
	for _, h := range released {
		if !bytes.Equal(h.p, numbered(h.i)) {
			changed++
			if !bytes.Equal(h.p, make([]byte, len(h.p))) {
				reread++
			}
		}
	}
	assert.Greater(t, changed, n/4, "released blocks were given back")
	assert.Greater(t, reread, 0, "released blocks were read into again")
}

// TestHeldBlockPinnedOtherwiseNotReused: a block that also holds a kept
// payload (Keep) or an open call's is never read into again, however its
// held payloads are released.
func TestHeldBlockPinnedOtherwiseNotReused(t *testing.T) {
	var kept [][]byte
	var next uint64
	mux := NewMux()
	mux.HandleFunc(1, func(r *Request) {
		i := next
		next++
		if i%97 == 0 {
			r.Keep()
			kept = append(kept, r.Payload())
			return
		}
		r.Hold().Release()
	})
	const n = 20000
	sendNumbered(t, mux, n)
	for j, got := range kept {
		require.Equal(t, numbered(uint64(97*j)), got, "kept message %d", 97*j)
	}
}

// A call's payload is valid until it is answered, whatever one-way
// payloads held in its block do; Hold on a call holds nothing.
func TestHeldBlockWithAnOpenCall(t *testing.T) {
	calls := make(chan *Request, 3)
	mux := NewMux()
	mux.HandleFunc(1, func(r *Request) { r.Hold().Release() })
	mux.HandleFunc(2, func(r *Request) { calls <- r })
	s, err := Listen("127.0.0.1:0", mux)
	require.NoError(t, err)
	defer s.Close()
	p := dialTest(t, s.Addr().String())
	ctx := ctxT(t)
	type result struct {
		reply []byte
		err   error
	}
	done := make(chan result, 3)
	var open []*Request
	for i := range 3 {
		go func() {
			b, err := p.Call(ctx, 2, numbered(uint64(1000+i)))
			done <- result{b, err}
		}()
		r := <-calls
		assert.Equal(t, Hold{}, r.Hold())
		open = append(open, r)
		for j := range 3000 {
			require.NoError(t, p.Send(ctx, 1, numbered(uint64(j))))
		}
	}
	// Every one-way message has been handled once a call behind them is.
	go func() { _, _ = p.Call(ctx, 2, nil) }()
	last := <-calls
	for i, r := range open {
		require.Equal(t, numbered(uint64(1000+i)), r.Payload(), "open call %d", i)
		require.NoError(t, r.Reply(r.Payload()))
	}
	require.NoError(t, last.Reply(nil))
	var got, want []string
	for i := range open {
		r := <-done
		require.NoError(t, r.err, "call %d", i)
		got = append(got, string(r.reply))
		want = append(want, string(numbered(uint64(1000+i))))
	}
	assert.ElementsMatch(t, want, got)
}
