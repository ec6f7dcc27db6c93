package partition

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/wire"
)

// TestLogKeepsEntriesItHandedOut: the log trims and drops blocks as it
// goes, and every entry it handed out still reads as it was, while the
// entries it keeps read back exactly and its blocks hold little more than
// they do.
func TestLogKeepsEntriesItHandedOut(t *testing.T) {
	const limit = 100
	entry := func(o uint64) Entry {
		e := Epoch{Term: 1 + o/300, Owner: "a"}
		v := bytes.Repeat([]byte{byte(o)}, 100+int(o%50))
		if o%7 == 0 {
			return Entry{Epoch: e, Offset: o, Type: wire.RecordRemove, Key: fmt.Sprintf("key-%d", o)}
		}
		return Entry{Epoch: e, Offset: o, Type: wire.RecordUpdate, Key: fmt.Sprintf("key-%d", o), Value: v}
	}
	var l entryLog
	var handedOut []Entry
	dropped := 0
	for o := uint64(1); o <= 2000; o++ {
		before := l.firstBlock
		l.append(entry(o), limit, DefaultHistoryBytes)
		dropped += int(l.firstBlock - before)
		if o%37 == 0 {
			handedOut = append(handedOut, l.at(o), l.at(l.base+1))
		}
		live := 0
		for p := l.base + 1; p <= l.last(); p++ {
			require.Equal(t, entry(p), l.at(p), "offset %d", p)
			live += len(entry(p).Key) + len(entry(p).Value)
		}
		if o > limit {
			require.EqualValues(t, limit, l.n)
			held := 0
			for _, b := range l.blocks {
				held += len(b)
			}
			require.LessOrEqual(t, held, live+maxBlock, "blocks go once trimming passed them")
		}
	}
	assert.Greater(t, dropped, 2, "the test dropped blocks")
	for _, e := range handedOut {
		assert.Equal(t, entry(e.Offset), e, "an entry handed out before later appends and compactions")
	}
	got := l.appendRange(nil, l.base+1, l.last())
	require.Len(t, got, limit)
	for _, e := range got {
		assert.Equal(t, entry(e.Offset), e)
	}

	l.reset(5000, Epoch{Term: 9}, nil)
	assert.Empty(t, l.blocks, "a reset log lets its blocks go")
	l.append(entry(5001), limit, DefaultHistoryBytes)
	assert.Equal(t, entry(5001), l.at(5001))
}

// The epoch runs outlive the entries they describe: trimming keeps them,
// a reset takes the server's, and agreement compares trimmed offsets too.
func TestLogKeepsEpochHistory(t *testing.T) {
	e1, e2, e3 := Epoch{Term: 1, Owner: "a"}, Epoch{Term: 2, Owner: "b"}, Epoch{Term: 3, Owner: "a"}
	var l entryLog
	for o := uint64(1); o <= 30; o++ {
		ep := e1
		switch {
		case o > 20:
			ep = e3
		case o > 10:
			ep = e2
		}
		l.append(Entry{Epoch: ep, Offset: o, Key: "k"}, 4, DefaultHistoryBytes)
	}
	require.Equal(t, uint64(26), l.base)
	require.Equal(t, []Run{{Epoch: e1, First: 1}, {Epoch: e2, First: 11}, {Epoch: e3, First: 21}}, l.runs)
	lo, hi, ok := l.span(e2)
	assert.True(t, ok)
	assert.Equal(t, [2]uint64{11, 20}, [2]uint64{lo, hi}, "a trimmed epoch's span")

	// An asker that stopped at 15 in e2 agrees through 15; one that wrote
	// 13-15 in an epoch this log never held agrees through 12.
	a, _, _, found := l.agreement(&Fetch{From: 16, Base: 5, BaseEpoch: e1, Runs: []Run{{Epoch: e1, First: 1}, {Epoch: e2, First: 11}}})
	assert.True(t, found)
	assert.Equal(t, uint64(15), a)
	other := Epoch{Term: 2, Owner: "c"}
	a, _, _, found = l.agreement(&Fetch{From: 16, Base: 5, BaseEpoch: e1, Runs: []Run{{Epoch: e1, First: 1}, {Epoch: e2, First: 11}, {Epoch: other, First: 13}}})
	assert.True(t, found)
	assert.Equal(t, uint64(12), a)

	var c entryLog
	c.reset(30, e3, slices.Clone(l.runs))
	assert.Equal(t, l.runs, c.runs, "a restored copy keeps the server's history")
	c.reset(30, e2, slices.Clone(l.runs))
	assert.Empty(t, c.runs, "runs that do not end in the base's epoch are refused")
	c.reset(30, e3, []Run{{Epoch: e2, First: 11}, {Epoch: e1, First: 12}, {Epoch: e3, First: 21}})
	assert.Empty(t, c.runs, "runs whose epochs fall are refused")
}

// TestLogBoundsItsBytes: the history is bounded by the bytes of its keys
// and values as well as by its entries. 1,000 writes of 1 MB to one key
// kept ~1 GB on every node when only entries counted (issue 17); here the
// log holds at most byteLimit of them, its blocks little more, and an
// entry larger than the bound is kept alone.
func TestLogBoundsItsBytes(t *testing.T) {
	const byteLimit = 2 << 20
	big := bytes.Repeat([]byte{7}, 1<<20-10)
	var l entryLog
	ep := Epoch{Term: 1, Owner: "a"}
	for o := uint64(1); o <= 1000; o++ {
		l.append(Entry{Epoch: ep, Offset: o, Type: wire.RecordUpdate, Key: "the-key", Value: big}, DefaultHistoryMax, byteLimit)
		require.LessOrEqual(t, l.bytes, byteLimit)
		held := 0
		for _, b := range l.blocks {
			held += cap(b)
		}
		require.LessOrEqual(t, held, byteLimit+maxBlock, "offset %d: blocks of trimmed entries go", o)
	}
	require.Equal(t, 2, l.n, "two writes of 1 MB fit in 2 MiB")
	assert.Equal(t, big, l.at(1000).Value)
	assert.Equal(t, uint64(998), l.base)

	l.append(Entry{Epoch: ep, Offset: 1001, Key: "k", Value: bytes.Repeat([]byte{1}, 3<<20)}, DefaultHistoryMax, byteLimit)
	require.Equal(t, 1, l.n, "an entry over the bound is kept alone")
	require.Equal(t, 3<<20+1, l.bytes)
	for o := uint64(1002); o <= 1100; o++ {
		l.append(Entry{Epoch: ep, Offset: o, Key: "k", Value: []byte("v")}, DefaultHistoryMax, byteLimit)
	}
	require.EqualValues(t, 99, l.n, "small entries after it")
	require.Equal(t, 99*2, l.bytes)
}
