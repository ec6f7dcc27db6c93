package partition

import (
	"bytes"
	"fmt"
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
		l.append(entry(o), limit)
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

	l.reset(5000, Epoch{Term: 9})
	assert.Empty(t, l.blocks, "a reset log lets its blocks go")
	l.append(entry(5001), limit)
	assert.Equal(t, entry(5001), l.at(5001))
}
