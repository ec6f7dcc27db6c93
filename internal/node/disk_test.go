package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership/memnet"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/ring"
	"github.com/fero-go/fero/internal/storage"
)

// startDurable starts a lone server on dir (it founds its cluster, a
// quorum of one) with a history of 200 bytes, so the disk takes snapshots.
func startDurable(t *testing.T, dir string) (*Node, error) {
	t.Helper()
	cfg := baseConfig(t, memnet.New(41), "a", false, nil)
	cfg.DataDir = dir
	cfg.Engine = append(cfg.Engine, partition.WithHistoryBytes(200))
	n, err := Start(ctxT(t), cfg)
	if err == nil {
		t.Cleanup(func() { _ = n.Close() })
	}
	return n, err
}

func writeKeys(t *testing.T, n *Node, from, to int) {
	t.Helper()
	ctx := ctxT(t)
	var b doc.Builder
	for i := from; i < to; i++ {
		c, err := b.Update(fmt.Sprint("k", i), i)
		require.NoError(t, err)
		require.NoError(t, write(ctx, n, c, partition.WaitMajority))
	}
}

func requireKeys(t *testing.T, n *Node, count int) {
	t.Helper()
	require.Equal(t, count, n.Store().Len())
	for i := range count {
		_, ok := n.Store().GetBytes(fmt.Sprint("k", i))
		require.True(t, ok, "k%d", i)
	}
}

// TestDataDirKeepsTheCopy: a server restarted on its data directory holds
// what it had, after a clean close and after a crash (its store abandoned
// as a killed process leaves it), and serves writes again at once.
func TestDataDirKeepsTheCopy(t *testing.T) {
	dir := t.TempDir()
	n, err := startDurable(t, dir)
	require.NoError(t, err)
	writeKeys(t, n, 0, 100)
	digest := n.Store().Digest()
	require.NoError(t, n.Close())
	// A clean close leaves a snapshot of every partition and no entries.
	st, err := storage.OpenSegmentLog(dir, storage.Options{})
	require.NoError(t, err)
	for p := range 32 {
		first, last, err := st.Bounds(p)
		require.NoError(t, err)
		require.Greater(t, first, last, "partition %d keeps entries %d-%d after a clean close", p, first, last)
	}
	require.NoError(t, st.Close())

	n, err = startDurable(t, dir)
	require.NoError(t, err)
	requireKeys(t, n, 100)
	require.Equal(t, digest, n.Store().Digest())
	writeKeys(t, n, 100, 150)
	// A crash: the directory as the process left it, no clean close.
	crashDisk(t, n)

	n, err = startDurable(t, dir)
	require.NoError(t, err)
	requireKeys(t, n, 150)
	snaps, err := filepath.Glob(filepath.Join(dir, "*.snap"))
	require.NoError(t, err)
	require.NotEmpty(t, snaps, "150 writes over 32 partitions with a history of 200 bytes: the disk took snapshots")
}

// crashDisk stops n and leaves its directory as a killed process would
// under the group policy: every round synced, no mark of a clean close.
func crashDisk(t *testing.T, n *Node) {
	t.Helper()
	d := n.disk
	n.disk = nil // Close must not mark the directory clean
	require.NoError(t, n.Close())
	require.NoError(t, d.store.Close())
}

// TestDataDirTornTail: garbage after the last record (a write a crash
// cut short) is cut, said in the log, and the node serves what it had.
func TestDataDirTornTail(t *testing.T) {
	dir := t.TempDir()
	n, err := startDurable(t, dir)
	require.NoError(t, err)
	writeKeys(t, n, 0, 40)
	require.NoError(t, n.Close())
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	slices.Sort(segs)
	f, err := os.OpenFile(segs[len(segs)-1], os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0x20, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	n, err = startDurable(t, dir)
	require.NoError(t, err)
	requireKeys(t, n, 40)
	writeKeys(t, n, 40, 50)
}

// TestDataDirRefusesWhatItCannotServe: a damaged snapshot, a directory in
// use, another resource's or another node's directory each stop the start
// with a message that says which.
func TestDataDirRefusesWhatItCannotServe(t *testing.T) {
	dir := t.TempDir()
	n, err := startDurable(t, dir)
	require.NoError(t, err)
	writeKeys(t, n, 0, 300)

	_, err = startDurable(t, dir)
	require.ErrorContains(t, err, "in use by another process")
	require.NoError(t, n.Close())

	other := func(edit func(*Config)) error {
		cfg := baseConfig(t, memnet.New(41), "a", false, nil)
		cfg.DataDir = dir
		edit(&cfg)
		n, err := Start(ctxT(t), cfg)
		if err == nil {
			_ = n.Close()
		}
		return err
	}
	require.ErrorContains(t, other(func(c *Config) { c.Resource = "orders" }), `holds resource "test", not "orders"`)
	require.ErrorContains(t, other(func(c *Config) { c.ID = "b" }), `belongs to node "a", not "b"`)
	require.ErrorContains(t, other(func(c *Config) { c.Client = true }), "client node keeps no data directory")
	require.ErrorContains(t, other(func(c *Config) { c.Ring = []ring.Option{ring.WithPartitions(64)} }), "written with 32 partitions, this node has 64")

	// A directory a newer fero wrote.
	st, err := storage.OpenSegmentLog(dir, storage.Options{})
	require.NoError(t, err)
	require.NoError(t, st.SetMeta(metaFormat, []byte("2")))
	require.NoError(t, st.Close())
	require.ErrorContains(t, other(func(*Config) {}), `has format "2"; this fero reads format 1`)
	st, err = storage.OpenSegmentLog(dir, storage.Options{})
	require.NoError(t, err)
	require.NoError(t, st.SetMeta(metaFormat, []byte("1")))
	require.NoError(t, st.Close())

	snaps, err := filepath.Glob(filepath.Join(dir, "*.snap"))
	require.NoError(t, err)
	require.NotEmpty(t, snaps)
	b, err := os.ReadFile(snaps[0])
	require.NoError(t, err)
	b[len(b)-3] ^= 0x10
	require.NoError(t, os.WriteFile(snaps[0], b, 0o644))
	_, err = startDurable(t, dir)
	require.ErrorIs(t, err, storage.ErrCorrupt)
	require.ErrorContains(t, err, "snapshot")
	// The advice a damaged segment gets (issue 43).
	require.ErrorContains(t, err, "move it away to start empty and catch up from peers")
}

// TestDataDirFull: a disk with no room fails writes with a clear error;
// the node stays up and its local reads keep working. Needs root (a small
// tmpfs).
func TestDataDirFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	// a's disk is the small one; b and c have room.
	nw := memnet.New(43)
	withDir := func(d string) func(*Config) { return func(c *Config) { c.DataDir = d } }
	a := startNodeCfg(t, nw, "a", false, nil, withDir(dir))
	seed := a.Membership().Local().Gossip
	b := startNodeCfg(t, nw, "b", false, nil, withDir(t.TempDir()), seed)
	c := startNodeCfg(t, nw, "c", false, nil, withDir(t.TempDir()), seed)
	nodes := []*Node{a, b, c}
	require.Eventually(t, func() bool { return settled(nodes, 3) }, 20*time.Second, 10*time.Millisecond)
	writeKeys(t, a, 0, 10)

	ctx, cancel := context.WithTimeout(ctxT(t), 60*time.Second)
	defer cancel()
	var bld doc.Builder
	big := strings.Repeat("x", 32<<10)
	var last error
	for i := 0; i < 64 && last == nil; i++ {
		ch, err := bld.Update(fmt.Sprint("big", i), big)
		require.NoError(t, err)
		_, last = a.Write(ctx, ch, partition.WaitMajority, 0)
	}
	require.Error(t, last, "256 KiB of disk took 64 writes of 32 KiB")
	require.ErrorContains(t, last, "disk")
	ch, err := bld.Update("after", big)
	require.NoError(t, err)
	_, err = a.Write(ctx, ch, partition.WaitAck, 0)
	require.ErrorIs(t, err, ErrDisk)
	require.Equal(t, errs.Unavailable, errs.CodeOf(err))
	_, ok := a.Store().GetBytes("k3")
	require.True(t, ok, "local reads work on a node whose disk is full")

	// a left the cluster: b and c own everything, and every key takes
	// writes again.
	require.Eventually(t, func() bool { return settled([]*Node{b, c}, 2) }, 20*time.Second, 10*time.Millisecond)
	writeKeys(t, b, 0, 40)
	require.ErrorContains(t, a.Close(), "no space left on device", "Close reports what stopped the disk")
}
