package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// TestAttachedClient, on real processes (issue 17: "a client node ...
// presents a token"): a client node started with --attach and a token,
// and no cluster secret, learns the servers, writes and reads; its own
// port asks for the token; a wrong token is refused at start. A raw
// connection that proves the token and attaches cannot have a server
// take a forged commit, epoch start, fence or ack of a newer epoch, and
// the servers' owners keep serving writes.
func TestAttachedClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	gen := func() string { return genSecret(ctx, t) }
	secretFile, tokenFile, wrongFile := filepath.Join(dir, "s"), filepath.Join(dir, "t"), filepath.Join(dir, "w")
	token := gen()
	writeSecrets(t, secretFile, gen())
	writeSecrets(t, tokenFile, token)
	writeSecrets(t, wrongFile, gen())
	base := []string{"users", "--partitions", "31"}
	a := serve(t, append(base, "--id", "a", "--cluster-secret-file", secretFile, "--token-file", tokenFile)...)
	b := serve(t, append(base, "--id", "b", "--cluster-secret-file", secretFile, "--token-file", tokenFile,
		"--seeds", a.gossip, "--wait-servers", "2")...)
	require.True(t, b.out.Scan())

	cl := serve(t, append(base, "--client", "--attach", a.data, "--token-file", tokenFile, "--wait-servers", "2")...)
	require.Contains(t, cl.first, " attached "+a.data+" ")
	require.True(t, cl.out.Scan())
	require.Contains(t, cl.out.Text(), "sees 2 servers")

	_, err := run(ctx, "serve", "users", "--partitions", "31", "--client", "--attach", a.data, "--token-file", wrongFile)
	require.ErrorContains(t, err, "permission_denied", "a wrong token")
	_, err = run(ctx, "serve", "users", "--client", "--attach", a.data, "--cluster-secret-file", secretFile)
	require.ErrorContains(t, err, "never the cluster secret")

	tok := []string{"--token-file", tokenFile}
	require.Eventually(t, func() bool {
		_, err := run(ctx, append([]string{"put", "--addr", cl.data, "k", `"v"`}, tok...)...)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the attached client writes")
	out, err := run(ctx, append([]string{"get", "--addr", b.data, "k"}, tok...)...)
	require.NoError(t, err)
	require.JSONEq(t, `"v"`, out)
	_, err = run(ctx, append([]string{"put", "--addr", b.data, "k2", `"w"`}, tok...)...)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		out, err := run(ctx, append([]string{"get", "--addr", cl.data, "k2"}, tok...)...)
		return err == nil && strings.TrimSpace(out) == `"w"`
	}, 10*time.Second, 20*time.Millisecond, "the attached client's copy has b's write")
	_, err = run(ctx, "get", "--addr", cl.data, "k")
	require.ErrorContains(t, err, "permission_denied", "the attached client's own port asks for the token")
	// The servers list it in their status.
	clID := strings.Fields(cl.first)[2]
	require.True(t, strings.HasPrefix(clID, "~"), clID)
	out, err = run(ctx, append([]string{"status", "--addr", a.data}, tok...)...)
	require.NoError(t, err)
	require.Regexp(t, regexp.QuoteMeta(clID)+`\s+client\s+attached`, out)

	// Raw connections that prove the token and attach to each server as
	// ~evil send every server message a client may not, for every
	// partition.
	// It is a copy now: a gets every commit to it, and notes the terms.
	var mu sync.Mutex
	terms := map[string]uint64{} // key → the highest term of a commit of it
	mux := transport.NewMux()
	mux.HandleFunc(protocol.OpEngine, func(r *transport.Request) {
		for _, m := range engineMessages(t, r.Payload()) {
			if c, ok := m.(*partition.Commit); ok {
				mu.Lock()
				for _, e := range c.Entries {
					terms[e.Key] = max(terms[e.Key], e.Epoch.Term)
				}
				mu.Unlock()
			}
		}
	})
	value, err := msgpack.Marshal("forged")
	require.NoError(t, err)
	evil := partition.Epoch{Term: 1 << 63, Owner: "~evil"} // terms start near the clock's nanoseconds
	hb, err := msgpack.Marshal(map[string]any{"id": "~evil", "a": true})
	require.NoError(t, err)
	var raws []*transport.Conn
	for _, s := range []*server{a, b} {
		raw, err := transport.DialConn(ctx, s.data, transport.WithHandler(mux))
		require.NoError(t, err)
		defer raw.Close()
		raws = append(raws, raw)
		require.NoError(t, protocol.Authenticate(ctx, raw, protocol.CredToken, protocol.TokenKey([]byte(token))))
		_, err = raw.Call(ctx, protocol.OpHello, hb)
		require.NoError(t, err)
		for p := range uint32(31) {
			batch := []byte{0}
			for _, m := range []partition.Message{
				&partition.EpochStart{Partition: p, Epoch: evil, Start: 1},
				&partition.Commit{Partition: p, Entries: []partition.Entry{{Epoch: evil, Offset: 1, Type: wire.RecordAdd, Key: "forged", Value: value}}},
				&partition.Fenced{Partition: p, Epoch: evil},
				&partition.CommitAck{Partition: p, Position: partition.Position{Epoch: evil, Offset: 1}},
			} {
				msg, err := partition.AppendMessage(nil, m)
				require.NoError(t, err)
				batch = append(binary.AppendUvarint(batch, uint64(len(msg))), msg...)
			}
			require.NoError(t, raw.Send(ctx, protocol.OpEngine, batch))
		}
	}
	// Writes after the forgeries are committed in the epochs the servers
	// started, not in one above the forged term (which an owner that took
	// the forged epoch would have to start).
	for i := range 31 {
		key := fmt.Sprint("after", i)
		require.Eventually(t, func() bool {
			_, err := run(ctx, append([]string{"put", "--addr", a.data, key, `"ok"`}, tok...)...)
			return err == nil
		}, 10*time.Second, 20*time.Millisecond, "the owners still take writes")
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return terms[key] != 0
		}, 10*time.Second, 5*time.Millisecond, "the attached copy gets the commit of %s", key)
	}
	mu.Lock()
	for k, term := range terms {
		require.Less(t, term, evil.Term, "%s committed in a term above the forged one: an owner took the forged epoch", k)
	}
	require.NotContains(t, terms, "forged")
	mu.Unlock()
	for _, s := range []*server{a, b} {
		_, err := run(ctx, append([]string{"get", "--addr", s.data, "forged"}, tok...)...)
		require.ErrorContains(t, err, "forged: not found", "a forged commit was applied")
		_, err = run(ctx, append([]string{"put", "--addr", s.data, "k", `"v2"`}, tok...)...)
		require.NoError(t, err, "an owner fenced by a forged epoch")
	}
	for _, raw := range raws {
		require.Nil(t, raw.Err(), "the attached connection serves on")
		// Adopted as a copy, it is still a token's connection: no forget.
		_, err := raw.Call(ctx, protocol.OpForget, nil)
		require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "forget on an attached connection: %v", err)
	}

	// A client of the cluster without the token cannot attach.
	raw2, err := transport.DialConn(ctx, a.data)
	require.NoError(t, err)
	defer raw2.Close()
	_, err = raw2.Call(ctx, protocol.OpHello, hb)
	require.Equal(t, errs.PermissionDenied, errs.CodeOf(err), "%v", err)
}

// engineMessages decodes an OpEngine batch (internal/node/codec.go): a
// flags byte, the sender's cluster if flagged, then each message as a
// uvarint length and its bytes.
func engineMessages(t *testing.T, b []byte) []partition.Message {
	t.Helper()
	flags, b := b[0], b[1:]
	if flags&2 != 0 {
		n, k := binary.Uvarint(b)
		b = b[k+int(n):]
		_, k = binary.Uvarint(b)
		b = b[k:]
	}
	var out []partition.Message
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		m, err := partition.DecodeMessage(bytes.Clone(b[k : k+int(n)]))
		require.NoError(t, err)
		out = append(out, m)
		b = b[k+int(n):]
	}
	return out
}
