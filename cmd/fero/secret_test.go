package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/node"
	"github.com/fero-go/fero/internal/transport"
)

// memberIDs returns the members the node at addr lists, by fero status.
func memberIDs(ctx context.Context, addr string) []string {
	out, err := run(ctx, "status", "--addr", addr, "--json")
	if err != nil {
		return nil
	}
	var st struct {
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if json.Unmarshal([]byte(out), &st) != nil {
		return nil
	}
	var ids []string
	for _, m := range st.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

func writeSecrets(t *testing.T, path string, secrets ...string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(secrets, "\n")+"\n"), 0o600))
}

// TestClusterSecret, on real processes: nodes that share a cluster secret
// form a cluster; a node with another secret or none never joins; a
// connection that names a member in its hello and cannot prove the secret
// is refused and closed (issue 17: a raw connection that sent the hello as
// a member received the engine traffic meant for it and had a forged
// commit applied); serve refuses to listen beyond loopback without a
// secret unless --insecure; and the secret rotates on the running cluster
// by SIGHUP, after which only the new secret joins.
func TestClusterSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	gen := func() string {
		out, err := run(ctx, "secret")
		require.NoError(t, err)
		s := strings.TrimSpace(out)
		require.Len(t, s, 64)
		return s
	}
	oldS, newS, otherS := gen(), gen(), gen()
	fileA, fileB := filepath.Join(dir, "a.secret"), filepath.Join(dir, "b.secret")
	fileOther, fileNew := filepath.Join(dir, "other.secret"), filepath.Join(dir, "new.secret")
	writeSecrets(t, fileA, oldS)
	writeSecrets(t, fileB, oldS)
	writeSecrets(t, fileOther, otherS)
	writeSecrets(t, fileNew, newS)
	fileOld := filepath.Join(dir, "old.secret")
	writeSecrets(t, fileOld, oldS)

	base := []string{"users", "--partitions", "31"}
	a := serve(t, append(base, "--id", "a", "--cluster-secret-file", fileA)...)
	b := serve(t, append(base, "--id", "b", "--cluster-secret-file", fileB, "--seeds", a.gossip, "--wait-servers", "2")...)
	require.True(t, b.out.Scan())
	require.Contains(t, b.out.Text(), "sees 2 servers")

	// Outsiders and a friend start together; once the friend is listed,
	// the outsiders had as long and are not.
	serve(t, append(base, "--id", "intruder", "--cluster-secret-file", fileOther, "--seeds", a.gossip)...)
	serve(t, append(base, "--id", "plain", "--seeds", a.gossip)...)
	serve(t, append(base, "--id", "friend", "--cluster-secret-file", fileA, "--seeds", a.gossip)...)
	require.Eventually(t, func() bool {
		return slices.Contains(memberIDs(ctx, a.data), "friend") && slices.Contains(memberIDs(ctx, b.data), "friend")
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"a", "b", "friend"}, memberIDs(ctx, a.data))
	require.Equal(t, []string{"a", "b", "friend"}, memberIDs(ctx, b.data))

	// A forger names b in its hello: it gets a's answer but cannot prove
	// the secret, and a closes the connection.
	raw, err := transport.DialConn(ctx, a.data)
	require.NoError(t, err)
	defer raw.Close()
	nonce := make([]byte, 32)
	hb, err := msgpack.Marshal(map[string]any{"id": "b", "n": nonce})
	require.NoError(t, err)
	_, err = raw.Call(ctx, node.OpHello, hb)
	require.NoError(t, err)
	pb, err := msgpack.Marshal(map[string]any{"m": make([]byte, 32)})
	require.NoError(t, err)
	_, err = raw.Call(ctx, node.OpHelloProof, pb)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	require.Eventually(t, func() bool { return raw.Err() != nil }, 10*time.Second, 10*time.Millisecond, "the forger's connection is closed")
	// A hello with no proof of a secret at all is refused outright.
	raw2, err := transport.DialConn(ctx, a.data)
	require.NoError(t, err)
	defer raw2.Close()
	hb, err = msgpack.Marshal(map[string]any{"id": "b"})
	require.NoError(t, err)
	_, err = raw2.Call(ctx, node.OpHello, hb)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)

	// Rotation on the running cluster: old+new, new+old, new.
	for _, round := range [][]string{{oldS, newS}, {newS, oldS}, {newS}} {
		for _, f := range []string{fileA, fileB} {
			writeSecrets(t, f, round...)
		}
		for _, s := range []*server{a, b} {
			require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
			require.True(t, s.out.Scan())
			require.Contains(t, s.out.Text(), "took "+string(rune('0'+len(round)))+" cluster secrets")
		}
	}
	serve(t, append(base, "--id", "stale", "--cluster-secret-file", fileOld, "--seeds", a.gossip)...)
	serve(t, append(base, "--id", "rotated", "--cluster-secret-file", fileNew, "--seeds", a.gossip)...)
	require.Eventually(t, func() bool {
		return slices.Contains(memberIDs(ctx, a.data), "rotated") && slices.Contains(memberIDs(ctx, b.data), "rotated")
	}, 30*time.Second, 50*time.Millisecond)
	require.NotContains(t, memberIDs(ctx, a.data), "stale")
	require.NotContains(t, memberIDs(ctx, b.data), "stale")
}

// TestServeRefusesBeyondLoopbackWithoutSecret: serve will not listen or
// gossip beyond loopback without a cluster secret, and says why, unless
// --insecure is given.
func TestServeRefusesBeyondLoopbackWithoutSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--bind", "0.0.0.0:0"},
		{"--preset", "lan", "--multicast=false"},
	} {
		_, err := run(ctx, append([]string{"serve", "users"}, args...)...)
		require.ErrorContains(t, err, "beyond loopback", "%v", args)
		require.ErrorContains(t, err, "--insecure", "%v", args)
	}
	s := serve(t, "users", "--listen", "0.0.0.0:0", "--insecure")
	require.True(t, strings.HasPrefix(s.data, "[::]:") || strings.HasPrefix(s.data, "0.0.0.0:"), s.data)
	s.stop(t)
}
