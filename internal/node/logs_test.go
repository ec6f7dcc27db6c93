package node

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
)

// logRecord is one record a recordingLog kept, with every attribute the
// logger carried.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recordingLog keeps every record logged through its handlers.
type recordingLog struct {
	mu   sync.Mutex
	recs []logRecord
}

func (l *recordingLog) logger() *slog.Logger { return slog.New(&recordingHandler{log: l}) }

// find returns the records at level whose message contains s.
func (l *recordingLog) find(level slog.Level, s string) []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRecord
	for _, r := range l.recs {
		if r.level == level && strings.Contains(r.msg, s) {
			out = append(out, r)
		}
	}
	return out
}

type recordingHandler struct {
	log   *recordingLog
	attrs []slog.Attr
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.log.mu.Lock()
	h.log.recs = append(h.log.recs, rec)
	h.log.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordingHandler{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

// TestNoSeedAnsweredWarns: a node whose seeds do not answer its join says
// so at WARN, naming each seed and why it failed, and says at WARN too
// once a seed answers. Before, it said nothing at serve's default level:
// it looked like a working cluster of one while its writes waited out
// their timeout.
func TestNoSeedAnsweredWarns(t *testing.T) {
	nw := memnet.New(41)
	nobody := "127.0.0.9:1"
	log := &recordingLog{}
	startNodeCfg(t, nw, "alone", false, nil, func(c *Config) { c.Logger = log.logger() }, nobody)
	warned := log.find(slog.LevelWarn, "no seed answered")
	require.Len(t, warned, 1)
	require.Contains(t, warned[0].msg, "has joined no cluster")
	require.Contains(t, warned[0].attrs["seeds"], nobody+" (")
	require.Contains(t, warned[0].attrs["seeds"], memnet.ErrUnreachable.Error(), "why the seed did not answer")

	// A seed that starts later: the node warns, then says it answered.
	tr := nw.NewTransport()
	log = &recordingLog{}
	late := startNodeCfg(t, nw, "late", false, nil, func(c *Config) { c.Logger = log.logger() }, tr.Addr())
	require.Len(t, log.find(slog.LevelWarn, "no seed answered"), 1)
	startNodeCfg(t, nw, "seed", false, nil, func(c *Config) {
		c.Membership = append(c.Membership, membership.WithTransport(tr))
	})
	require.Eventually(t, func() bool { return len(log.find(slog.LevelWarn, "a seed answered")) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, tr.Addr(), log.find(slog.LevelWarn, "a seed answered")[0].attrs["seed"])
	require.Eventually(t, func() bool { return settled([]*Node{late}, 2) }, 20*time.Second, 10*time.Millisecond)

	// A node whose seed answers at once says nothing of it.
	log = &recordingLog{}
	startNodeCfg(t, nw, "joined", false, nil, func(c *Config) { c.Logger = log.logger() }, tr.Addr())
	require.Empty(t, log.find(slog.LevelWarn, "seed"))
}

// TestDroppedWritesLogAtWarn (docs/engine.md rule 6): writes a node gave up
// are logged at WARN, above serve's default level, one line per partition
// per round with how many and which offsets, not one per write.
func TestDroppedWritesLogAtWarn(t *testing.T) {
	log := &recordingLog{}
	n := startNodeCfg(t, memnet.New(42), "a", false, nil, func(c *Config) { c.Logger = log.logger() })
	var evs []partition.Event
	for _, d := range []struct {
		p      int
		offset uint64
	}{{3, 7}, {3, 5}, {3, 6}, {9, 2}} {
		evs = append(evs, partition.Event{Kind: partition.EventDropped, Partition: d.p, Entry: partition.Entry{Offset: d.offset}})
	}
	n.engMu.Lock()
	n.process(partition.Ready{Events: evs})
	n.engMu.Unlock()
	got := map[string]string{}
	for _, r := range log.find(slog.LevelWarn, "dropped writes") {
		got[r.attrs["partition"]] = r.attrs["writes"] + " " + r.attrs["offsets"]
	}
	require.Equal(t, map[string]string{"3": "3 5-7", "9": "1 2-2"}, got)
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		require.Empty(t, log.find(level, "dropped"), "nothing about dropped writes below WARN")
	}
}
