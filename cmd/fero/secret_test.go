package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
)

// memberIDs returns the members the node at addr lists, by fero status.
func memberIDs(ctx context.Context, addr string, cred ...string) []string {
	out, err := run(ctx, append([]string{"status", "--addr", addr, "--json"}, cred...)...)
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

// genSecret runs `fero secret` and returns the secret it prints.
func genSecret(ctx context.Context, t *testing.T) string {
	t.Helper()
	out, err := run(ctx, "secret")
	require.NoError(t, err)
	return strings.TrimSpace(out)
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

	// The operator's credential: a file holding whichever secret the
	// cluster takes now.
	fileAdmin := filepath.Join(dir, "admin.secret")
	writeSecrets(t, fileAdmin, oldS)
	admin := []string{"--cluster-secret-file", fileAdmin}
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
		return slices.Contains(memberIDs(ctx, a.data, admin...), "friend") && slices.Contains(memberIDs(ctx, b.data, admin...), "friend")
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"a", "b", "friend"}, memberIDs(ctx, a.data, admin...))
	require.Equal(t, []string{"a", "b", "friend"}, memberIDs(ctx, b.data, admin...))

	// A forger names b in its hello: it gets a's answer but cannot prove
	// the secret, and a closes the connection.
	raw, err := transport.DialConn(ctx, a.data)
	require.NoError(t, err)
	defer raw.Close()
	nonce := make([]byte, 32)
	hb, err := msgpack.Marshal(map[string]any{"id": "b", "n": nonce})
	require.NoError(t, err)
	_, err = raw.Call(ctx, protocol.OpHello, hb)
	require.NoError(t, err)
	pb, err := msgpack.Marshal(map[string]any{"m": make([]byte, 32)})
	require.NoError(t, err)
	_, err = raw.Call(ctx, protocol.OpHelloProof, pb)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
	require.Eventually(t, func() bool { return raw.Err() != nil }, 10*time.Second, 10*time.Millisecond, "the forger's connection is closed")
	// A hello with no proof of a secret at all is refused outright.
	raw2, err := transport.DialConn(ctx, a.data)
	require.NoError(t, err)
	defer raw2.Close()
	hb, err = msgpack.Marshal(map[string]any{"id": "b"})
	require.NoError(t, err)
	_, err = raw2.Call(ctx, protocol.OpHello, hb)
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
	writeSecrets(t, fileAdmin, newS)
	serve(t, append(base, "--id", "stale", "--cluster-secret-file", fileOld, "--seeds", a.gossip)...)
	serve(t, append(base, "--id", "rotated", "--cluster-secret-file", fileNew, "--seeds", a.gossip)...)
	require.Eventually(t, func() bool {
		return slices.Contains(memberIDs(ctx, a.data, admin...), "rotated") && slices.Contains(memberIDs(ctx, b.data, admin...), "rotated")
	}, 30*time.Second, 50*time.Millisecond)
	require.NotContains(t, memberIDs(ctx, a.data, admin...), "stale")
	require.NotContains(t, memberIDs(ctx, b.data, admin...), "stale")
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

// TestClientTokens, on real processes: a node with a cluster secret and a
// token file refuses the CLI without a credential, serves it with a
// token (writes, reads, status) but refuses it forget, serves forget with
// the cluster secret, and takes a new token file on SIGHUP.
func TestClientTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	gen := func() string { return genSecret(ctx, t) }
	secretFile, tokenFile, newTokenFile := filepath.Join(dir, "s"), filepath.Join(dir, "t"), filepath.Join(dir, "t2")
	tok1, tok2 := gen(), gen()
	writeSecrets(t, secretFile, gen())
	writeSecrets(t, tokenFile, tok1)
	writeSecrets(t, newTokenFile, tok2)
	a := serve(t, "users", "--id", "a", "--partitions", "31", "--cluster-secret-file", secretFile, "--token-file", tokenFile)
	b := serve(t, "users", "--id", "b", "--partitions", "31", "--cluster-secret-file", secretFile, "--token-file", tokenFile,
		"--seeds", a.gossip, "--wait-servers", "2")
	require.True(t, b.out.Scan())

	_, err := run(ctx, "status", "--addr", a.data)
	require.ErrorContains(t, err, "permission_denied")
	_, err = run(ctx, "put", "--addr", a.data, "k", `"v"`)
	require.ErrorContains(t, err, "permission_denied")

	tok := []string{"--token-file", tokenFile}
	require.Eventually(t, func() bool {
		_, err := run(ctx, append([]string{"put", "--addr", a.data, "k", `"v"`}, tok...)...)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "a token writes once the cluster has formed")
	out, err := run(ctx, append([]string{"get", "--addr", b.data, "k"}, tok...)...)
	require.NoError(t, err)
	require.JSONEq(t, `"v"`, out)
	_, err = run(ctx, append([]string{"forget", "--addr", a.data, "nobody", "--unknown"}, tok...)...)
	require.ErrorContains(t, err, "permission_denied")
	_, err = run(ctx, "forget", "--addr", a.data, "nobody", "--unknown", "--cluster-secret-file", secretFile)
	require.NotContains(t, fmt.Sprint(err), "permission_denied")

	// A new token on SIGHUP: the old one is refused from then on.
	writeSecrets(t, tokenFile, tok2)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	for a.out.Scan() && !strings.Contains(a.out.Text(), "client tokens") {
	}
	_, err = run(ctx, "status", "--addr", a.data, "--token-file", newTokenFile)
	require.NoError(t, err)
	writeSecrets(t, newTokenFile, tok1)
	_, err = run(ctx, "status", "--addr", a.data, "--token-file", newTokenFile)
	require.ErrorContains(t, err, "permission_denied")
}
