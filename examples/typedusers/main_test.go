package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/examples/typedusers/users"
	"github.com/fero-go/fero/examples/typedusers/users/usersfero"
	"github.com/fero-go/fero/pkg/fero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// TestDemo runs the demo, on real loopback sockets, and checks what the
// client saw.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	var buf bytes.Buffer
	out, err := runDemo(ctx, &buf)
	require.NoError(t, err, "transcript:\n%s", buf.String())
	t.Logf("transcript:\n%s", buf.String())

	assert.Equal(t, email, out.Registered.Email)
	assert.True(t, strings.HasPrefix(out.Registered.Server, "server-"), out.Registered.Server)
	assert.Equal(t, out.Registered.Server, out.Login.Server, "one owner answered both")
	assert.Len(t, out.Login.Token, 26)
	assert.WithinDuration(t, time.Now().Add(time.Hour), out.Login.Expires, time.Minute)
	assert.Equal(t, users.CodeConflict, fero.CodeOf(out.Duplicate), "%v", out.Duplicate)
	assert.Equal(t, fero.CodePermissionDenied, fero.CodeOf(out.WrongPassword), "%v", out.WrongPassword)
	assert.Equal(t, fero.CodeUnimplemented, fero.CodeOf(out.Reset), "%v", out.Reset)
	assert.Equal(t, "Ann", out.AtEnd.Name)
	assert.Equal(t, hashPassword(out.AtEnd.Salt, password), out.AtEnd.Hash)
}

// TestEndToEnd runs users.Users on three server nodes, mounted with the
// generated RegisterUsers, and calls it from a client node through the
// generated client (and from outside the cluster through a fero.Remote).
//
// Routing is checked against fero's own record of ownership: each
// server's change stream marks the changes it committed as the owner of
// their partition (Kind Committed), and a change is committed by exactly
// one node. REGISTER adds the user at its key and LOGIN writes a session
// under it, so the one server that committed both is the owner of the
// key's partition; each reply names the server that answered, and it
// must be that one. The cluster's membership does not change during the
// test, so neither does the owner.
func TestEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := &UsersService{SessionTTL: time.Hour}
	c := ferotest.NewCluster(t, usersfero.UsersResourceName, ferotest.WithServers(0))
	var servers []*fero.Resource
	for i := range 3 {
		servers = append(servers, c.Add(fero.WithID(fmt.Sprintf("server-%d", i+1)), usersfero.RegisterUsers(svc)))
	}
	client := c.Add(fero.WithID("client"), fero.Client())
	c.WaitSettled()
	committed := ferotest.WatchCommits(t, servers...)

	u := usersfero.NewUsersClient(client)
	const n = 12
	regs := map[users.UserKey]*users.RegisterReply{}
	logins := map[users.UserKey]*users.LoginReply{}
	for i := range n {
		email := fmt.Sprintf("user.%d@example.com", i)
		key := users.KeyOf(email)
		require.NoError(t, retry(ctx, func() (err error) {
			regs[key], err = u.Register(ctx, &users.RegisterRequest{User: key, Email: email, Name: fmt.Sprint("user ", i), Password: password})
			return err
		}))
		assert.Equal(t, email, regs[key].Email, "a typed reply")
		assert.WithinDuration(t, time.Now(), regs[key].Created, time.Minute)
		require.NoError(t, retry(ctx, func() (err error) {
			logins[key], err = u.Login(ctx, &users.LoginRequest{User: key, Password: password})
			return err
		}))
		assert.Len(t, logins[key].Token, 26)
	}

	// Each key's user and session were committed by one server, the owner
	// of the key's partition, and that server answered REGISTER and LOGIN.
	require.Eventually(t, func() bool {
		for key := range regs {
			if len(committed.Of(string(key))) == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every server's commits seen")
	answered := map[string]int{}
	for key, reg := range regs {
		assert.Equal(t, []string{reg.Server}, committed.Of(string(key)), "%s: REGISTER answered by the owner of its key, the one committer", key)
		assert.Equal(t, reg.Server, logins[key].Server, "%s: LOGIN answered by the owner too", key)
		answered[reg.Server]++
	}
	t.Logf("keys answered per server: %v", answered)
	assert.Greater(t, len(answered), 1, "%d keys spread over the servers", n)

	// The same interface through a Remote, from outside the cluster, and
	// through a server's own node: implementations are interchangeable.
	remote, err := fero.Dial(ctx, servers[0].Addr())
	require.NoError(t, err)
	defer func() { require.NoError(t, remote.Close()) }()
	key := users.KeyOf("user.0@example.com")
	for name, via := range map[string]users.Users{"remote": usersfero.NewUsersClient(remote), "server": usersfero.NewUsersClient(servers[2])} {
		var l *users.LoginReply
		require.NoError(t, retry(ctx, func() (err error) {
			l, err = via.Login(ctx, &users.LoginRequest{User: key, Password: password})
			return err
		}), name)
		assert.Equal(t, regs[key].Server, l.Server, "%s: answered by the owner", name)
	}

	// Coded errors, typed: the service's own, fero's, and a verb that is
	// declared but not implemented.
	_, err = u.Register(ctx, &users.RegisterRequest{User: key, Email: "user.0@example.com", Password: "another password"})
	assert.Equal(t, users.CodeConflict, fero.CodeOf(err), "%v", err)
	_, err = u.Login(ctx, &users.LoginRequest{User: key, Password: "wrong password"})
	assert.Equal(t, fero.CodePermissionDenied, fero.CodeOf(err), "%v", err)
	err = u.ResetPassword(ctx, &users.ResetPasswordRequest{User: key})
	assert.Equal(t, fero.CodeUnimplemented, fero.CodeOf(err), "%v", err)
	assert.EqualError(t, err, "fero: unimplemented: users: RESET is not implemented")
	_, err = u.Login(ctx, &users.LoginRequest{User: "a.b", Password: password})
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(err), "a key with a dot: %v", err)

	// A request whose key field is not the key it is sent to is refused
	// by the generated handler.
	err = client.Call(ctx, usersfero.UsersLoginVerb, "someone-else", &users.LoginRequest{User: key, Password: password}, nil)
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), `the request's User is "user%2E0@example%2Ecom"`)

	// Verbs the interface does not declare go to fero's built-in handling:
	// GET answers the owner's value, an unknown verb CodeUnimplemented.
	var stored users.User
	require.NoError(t, client.Call(ctx, fero.VerbGet, string(key), nil, &stored))
	assert.Equal(t, "user.0@example.com", stored.Email)
	assert.Contains(t, stored.Sessions, logins[key].Token)
	err = client.Call(ctx, "FROBNICATE", string(key), nil, nil)
	assert.Equal(t, fero.CodeUnimplemented, fero.CodeOf(err), "%v", err)

	// LOGOUT replies nothing; the client's copy loses the session.
	require.NoError(t, retry(ctx, func() error {
		return u.Logout(ctx, &users.LogoutRequest{User: key, Token: logins[key].Token})
	}))
	require.Eventually(t, func() bool {
		var have users.User
		ok, err := client.GetInto(string(key), &have)
		_, open := have.Sessions[logins[key].Token]
		return ok && err == nil && !open
	}, 10*time.Second, 10*time.Millisecond)

	// Called directly, outside a generated handler, the implementation
	// has no request to answer and says so.
	_, err = svc.Login(ctx, &users.LoginRequest{User: key, Password: password})
	assert.Equal(t, fero.CodeFailedPrecondition, fero.CodeOf(err), "%v", err)
}
