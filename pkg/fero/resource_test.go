package fero

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// TestWritesReachEveryCopy: every write helper and every wait, sent
// through servers and a client, ends up in every copy; the client owns
// nothing and reads locally.
func TestWritesReachEveryCopy(t *testing.T) {
	c := newTestCluster(t, 1)
	a, b, s3 := c.open("a"), c.open("b"), c.open("c")
	client := c.open("client", Client())
	c.settle(3)
	nodes := []*Resource{a, b, s3, client}
	ctx := ctxT(t)

	waits := []Wait{NoWait, Ack, Majority, Replicas(1), Replicas(2)}
	for i := range 100 {
		via := nodes[i%len(nodes)]
		w := waits[i%len(waits)]
		require.NoError(t, retry(ctx, func() error {
			return via.Update(ctx, fmt.Sprintf("user%d", i), map[string]any{"n": i, "tags": []any{"a"}}, w)
		}), "write %d via %s with %v", i, via.ID(), w)
	}
	require.NoError(t, retry(ctx, func() error { return client.Push(ctx, "user1.tags", "b") }))
	require.NoError(t, retry(ctx, func() error { return a.Add(ctx, "user2.email", "two@example.com", Majority) }))
	require.NoError(t, retry(ctx, func() error {
		return b.Patch(ctx, "user3", map[string]any{"n": 33, "name": "three"}, Majority)
	}))
	require.NoError(t, retry(ctx, func() error { return client.Remove(ctx, "user4") }))
	v, err := msgpack.Marshal("set")
	require.NoError(t, err)
	require.NoError(t, retry(ctx, func() error {
		return client.Set(ctx, Change{Type: Update, Key: "user5.via", Value: v}, Ack)
	}))
	c.converged(nodes, 99)

	for _, r := range nodes {
		tags, ok := r.Get("user1.tags")
		require.True(t, ok)
		assert.Equal(t, []any{"a", "b"}, tags, "on %s", r.ID())
		var u struct {
			N     int    `msgpack:"n"`
			Name  string `msgpack:"name"`
			Email string `msgpack:"email"`
		}
		ok, err := r.GetInto("user3", &u)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, 33, u.N)
		assert.Equal(t, "three", u.Name)
		email, _ := r.Get("user2.email")
		assert.Equal(t, "two@example.com", email)
		via, _ := r.Get("user5.via")
		assert.Equal(t, "set", via)
		_, ok = r.Get("user4")
		assert.False(t, ok)
		assert.Len(t, r.Snapshot(), 99)
	}

	// A create-once of a key that exists is refused with its cause.
	err = client.Add(ctx, "user2.email", "again")
	assert.Equal(t, CodeFailedPrecondition, CodeOf(err), "%v", err)
	// A bad write is refused before it leaves the node.
	assert.Equal(t, CodeInvalidArgument, CodeOf(client.Update(ctx, "", 1)))
	assert.Equal(t, CodeInvalidArgument, CodeOf(client.Update(ctx, "x", 1, Replicas(0))))
	assert.Equal(t, CodeInvalidArgument, CodeOf(client.Set(ctx, Change{Type: 9, Key: "x"})))

	// The client owns nothing; the servers own everything between them.
	owned := 0
	for _, m := range client.Members() {
		if m.ID == "client" {
			assert.True(t, m.Client)
			assert.Zero(t, m.Owned)
		}
		owned += m.Owned
	}
	assert.Equal(t, 32, owned)
	st := client.Stats()
	assert.Zero(t, st.Committed)
	assert.Zero(t, st.Gained)
	assert.NotZero(t, st.Applied)
}

// TestTypedMap: the generic form encodes Go values and refuses keys that
// would address a path.
func TestTypedMap(t *testing.T) {
	type session struct {
		User    string    `msgpack:"user"`
		Expires time.Time `msgpack:"expires"`
	}
	c := newTestCluster(t, 2)
	a := Typed[session](c.open("a"))
	b := Typed[session](c.open("b"))
	c.settle(2)
	ctx := ctxT(t)
	exp := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for i := range 20 {
		require.NoError(t, retry(ctx, func() error {
			return a.Put(ctx, fmt.Sprint("s", i), session{User: fmt.Sprint("u", i), Expires: exp}, Majority)
		}))
	}
	require.Eventually(t, func() bool { return b.Len() == 20 }, 10*time.Second, 10*time.Millisecond)
	s, ok, err := b.Get("s7")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "u7", s.User)
	assert.True(t, exp.Equal(s.Expires))
	_, ok, err = b.Get("missing")
	assert.NoError(t, err)
	assert.False(t, ok)
	all := b.Snapshot()
	assert.Len(t, all, 20)
	assert.Equal(t, "u3", all["s3"].User)

	err = b.Add(ctx, "s1", session{User: "dup"})
	assert.Equal(t, CodeFailedPrecondition, CodeOf(err), "%v", err)
	require.NoError(t, b.Delete(ctx, "s1", Majority))
	require.Eventually(t, func() bool { return a.Len() == 19 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, CodeInvalidArgument, CodeOf(a.Put(ctx, "a.b", session{})))

	// A value written in another shape through the dynamic form: Get says
	// so, All skips it.
	require.NoError(t, a.Resource().Update(ctx, "odd", []any{1, 2}, Majority))
	require.Eventually(t, func() bool { return b.Len() == 20 }, 10*time.Second, 10*time.Millisecond)
	_, _, err = b.Get("odd")
	assert.Error(t, err)
	assert.Len(t, b.Snapshot(), 19)
}

// TestHandlers: custom verbs run on the owner of their key, may fall
// through to the built-in handling, and every error path comes back
// coded.
func TestHandlers(t *testing.T) {
	type login struct {
		Email    string `msgpack:"email"`
		Password string `msgpack:"password"`
	}
	c := newTestCluster(t, 3)
	handler := func(ctx context.Context, req *Request) (any, error) {
		switch req.Verb {
		case "REGISTER":
			var l login
			if err := req.Decode(&l); err != nil {
				return nil, err
			}
			if err := req.Resource().Add(ctx, req.Key, map[string]any{"password": l.Password}); err != nil {
				if CodeOf(err) == CodeFailedPrecondition {
					return nil, Errorf(409, "%s is already registered", req.Key)
				}
				return nil, err
			}
			return []any{200, "ok"}, nil
		case "LOGIN":
			var l login
			if err := req.Decode(&l); err != nil {
				return nil, err
			}
			var stored struct {
				Password string `msgpack:"password"`
			}
			if ok, err := req.Resource().GetInto(req.Key, &stored); err != nil || !ok || stored.Password != l.Password {
				return nil, Errorf(CodePermissionDenied, "wrong email or password")
			}
			return map[string]any{"owner": req.Resource().ID(), "token": "t-" + req.Key}, nil
		case "PANIC":
			panic("handler bug")
		case "UPDATE", "REMOVE", "GET":
			return req.Next(ctx)
		}
		return req.Next(ctx) // ADD and unknown verbs: the built-in answer
	}
	a := c.open("a", WithHandler(handler))
	b := c.open("b", WithHandler(handler))
	s3 := c.open("c", WithHandler(handler))
	client := c.open("client", Client())
	c.settle(3)
	ctx := ctxT(t)

	for i := range 30 {
		email := fmt.Sprintf("u%d@example.com", i)
		var reply []any
		require.NoError(t, retry(ctx, func() error {
			return client.Call(ctx, "REGISTER", email, login{Email: email, Password: "pw"}, &reply)
		}))
		assert.Equal(t, []any{uint8(200), "ok"}, reply)
		var got struct {
			Owner string `msgpack:"owner"`
			Token string `msgpack:"token"`
		}
		require.NoError(t, a.Call(ctx, "LOGIN", email, login{Email: email, Password: "pw"}, &got))
		owner, _ := client.node().Map().OwnerOfKey(email)
		assert.Equal(t, owner.ID, got.Owner, "LOGIN %s answered by the owner", email)
		assert.Equal(t, "t-"+email, got.Token)
	}

	err := b.Call(ctx, "REGISTER", "u1@example.com", login{Password: "x"}, nil)
	assert.Equal(t, Code(409), CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "already registered")
	err = client.Call(ctx, "LOGIN", "u1@example.com", login{Password: "wrong"}, nil)
	assert.Equal(t, CodePermissionDenied, CodeOf(err))

	// Built-in verbs as requests, and GET answered by the owner.
	require.NoError(t, client.Call(ctx, VerbUpdate, "color", "blue", nil))
	var color string
	require.NoError(t, s3.Call(ctx, VerbGet, "color", nil, &color))
	assert.Equal(t, "blue", color)

	// Errors: unknown verb, handler panic, bad payload, oversized value,
	// and a closed resource; through the client and locally.
	for _, via := range []*Resource{client, a} {
		err = via.Call(ctx, "FROBNICATE", "k", nil, nil)
		assert.Equal(t, CodeUnimplemented, CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), `unknown verb "FROBNICATE"`)
		err = via.Call(ctx, "PANIC", "k", nil, nil)
		assert.Equal(t, CodeInternal, CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), "panicked")
		err = via.Call(ctx, "LOGIN", "k", "not a login", nil)
		assert.Equal(t, CodeInvalidArgument, CodeOf(err), "%v", err)
		// 12 MB of nesting in a field the handler's type lacks: decoding
		// it recursively overflowed the stack and ended the process.
		deep := append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 12<<20)...)
		deep[len(deep)-1] = 0xc0
		err = via.Call(ctx, "LOGIN", "k", msgpack.RawMessage(deep), nil)
		assert.Equal(t, CodeInvalidArgument, CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), "nests deeper")
		err = via.Update(ctx, "big", strings.Repeat("x", 2<<20))
		assert.Equal(t, CodeInvalidArgument, CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), "exceeds the limit")
		err = via.Call(ctx, VerbUpdate, "big", strings.Repeat("x", 2<<20), nil)
		assert.Equal(t, CodeInvalidArgument, CodeOf(err), "%v", err)
	}

	require.NoError(t, client.Close())
	require.NoError(t, client.Close())
	for name, err := range map[string]error{
		"update": client.Update(ctx, "k", 1),
		"call":   client.Call(ctx, "LOGIN", "k", nil, nil),
		"send":   client.Send(ctx, "LOGIN", "k", nil),
	} {
		assert.ErrorIs(t, err, ErrClosed, name)
		assert.Equal(t, CodeUnavailable, CodeOf(err), name)
	}
}

// TestMemberEvents: the stream starts with the current members and
// reports a peer that leaves.
func TestMemberEvents(t *testing.T) {
	c := newTestCluster(t, 14)
	a, b := c.open("a"), c.open("b")
	c.settle(2)
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	seen := map[string]string{}
	closed := false
	for ev := range a.MemberEvents(ctx) {
		seen[ev.Member.ID] = ev.Member.Status
		if !closed && seen["a"] == "connected" && seen["b"] == "connected" {
			closed = true
			require.NoError(t, b.Close())
		}
		if seen["b"] == "removed" {
			break
		}
	}
	assert.Equal(t, "removed", seen["b"], "events seen: %v", seen)
	assert.Equal(t, "connected", seen["a"])
}

// TestSetAsync: many writes in flight from one goroutine; every callback
// runs exactly once, and the writes land.
func TestSetAsync(t *testing.T) {
	c := newTestCluster(t, 16)
	a, client := c.open("a"), c.open("client", Client())
	c.settle(1)
	ctx := ctxT(t)
	require.NoError(t, retry(ctx, func() error { return client.Update(ctx, "warm", 1) }))
	const n = 2000
	var mu sync.Mutex
	var done, failed int
	all := make(chan struct{})
	for i := range n {
		v, err := msgpack.Marshal(i)
		require.NoError(t, err)
		require.NoError(t, client.SetAsync(ctx, Change{Type: Update, Key: fmt.Sprint("a", i%100), Value: v}, Ack, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			done++
			if err != nil {
				failed++
			}
			if done == n {
				close(all)
			}
		}))
	}
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("%d of %d callbacks ran", done, n)
	}
	assert.Zero(t, failed)
	c.converged([]*Resource{a, client}, 101)
	assert.Equal(t, CodeInvalidArgument, CodeOf(client.SetAsync(ctx, Change{Type: Update, Key: "x", Value: v1}, NoWait, func(error) {})))
	require.NoError(t, client.SetAsync(ctx, Change{Type: Update, Key: "x", Value: v1}, NoWait, nil))
	require.NoError(t, client.Close())
	assert.ErrorIs(t, client.SetAsync(ctx, Change{Type: Update, Key: "x", Value: v1}, Ack, func(error) {}), ErrClosed)
}

var v1 = msgpack.RawMessage{0x01}
