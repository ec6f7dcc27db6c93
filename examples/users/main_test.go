package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

// TestDemo runs the demo in this process and checks every reply and
// coded error the client got, and what its own copy held.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	var buf bytes.Buffer
	start := time.Now()
	out, err := runDemo(ctx, &buf)
	require.NoError(t, err, "transcript:\n%s", buf.String())
	t.Logf("demo took %v:\n%s", time.Since(start), buf.String())

	require.Len(t, out.Registered, 2)
	assert.Equal(t, ann, out.Registered[0].Email)
	assert.Equal(t, bob, out.Registered[1].Email)

	assert.Len(t, out.Login.Token, 26, "LOGIN answered with a token")
	assert.WithinDuration(t, time.Now().Add(time.Hour), out.Login.Expires, time.Minute)
	after := out.AfterLogin[UserKey(ann)]
	assert.Equal(t, ann, after.Email)
	assert.Contains(t, after.Sessions, out.Login.Token, "the client's copy holds the session")
	assert.NotEmpty(t, after.Salt)
	assert.Equal(t, hashPassword(after.Salt, password), after.Hash, "the password is stored salted and hashed")

	assert.Equal(t, CodeConflict, fero.CodeOf(out.Duplicate), "%v", out.Duplicate)
	assert.Equal(t, fero.CodePermissionDenied, fero.CodeOf(out.WrongPassword), "%v", out.WrongPassword)
	assert.Equal(t, fero.CodePermissionDenied, fero.CodeOf(out.UpdateHash), "%v", out.UpdateHash)
	assert.Equal(t, CodeMethodNotAllowed, fero.CodeOf(out.UnknownVerb), "%v", out.UnknownVerb)

	require.Len(t, out.AtEnd, 1, "bob was removed")
	end := out.AtEnd[UserKey(ann)]
	assert.Equal(t, "Ann Lee", end.Name)
	assert.Empty(t, end.Sessions, "LOGOUT removed the session")
	assert.Equal(t, hashPassword(end.Salt, password), end.Hash, "the refused UPDATE changed nothing")
}

// TestRetries: a retried REGISTER or LOGIN (same request ID) is answered
// as the first attempt was; a new REGISTER of the email is a conflict;
// LOGOUT twice succeeds twice.
func TestRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	r, err := fero.Open(ctx, "users", fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast(),
		fero.WithHandler(NewService(time.Hour).Handle))
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	require.NoError(t, r.WaitServers(ctx, 1))
	call := func(verb, key string, payload, reply any) error {
		for {
			err := r.Call(ctx, verb, key, payload, reply)
			if err == nil || !retryable(err) || ctx.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	key := UserKey("dee@example.com")
	reg := RegisterRequest{Request: NewRequestID(), Email: "dee@example.com", Name: "Dee", Password: password}
	var first, again RegisterReply
	require.NoError(t, call(VerbRegister, key, reg, &first))
	require.NoError(t, call(VerbRegister, key, reg, &again), "a retry succeeds")
	assert.True(t, first.Created.Equal(again.Created), "and answers with the first registration")
	reg.Request = NewRequestID()
	assert.Equal(t, CodeConflict, fero.CodeOf(call(VerbRegister, key, reg, nil)))

	login := LoginRequest{Request: NewRequestID(), Password: password}
	var l1, l2 LoginReply
	require.NoError(t, call(VerbLogin, key, login, &l1))
	require.NoError(t, call(VerbLogin, key, login, &l2))
	assert.Equal(t, l1, l2, "a retried LOGIN answers with the same session")
	var u User
	_, err = r.GetInto(key, &u)
	require.NoError(t, err)
	assert.Len(t, u.Sessions, 1)

	for range 2 {
		require.NoError(t, call(VerbLogout, key, LogoutRequest{Token: l1.Token}, nil))
	}
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(call(VerbLogout, key, LogoutRequest{Token: "a.b"}, nil)))
	assert.Equal(t, fero.CodeInvalidArgument, fero.CodeOf(call(VerbLogin, "dee@example.com", login, nil)), "a key with dots")
}

// TestUserKey: keys are one path segment and one-to-one.
func TestUserKey(t *testing.T) {
	assert.Equal(t, "ann@example%2Ecom", UserKey(" Ann@Example.com "))
	assert.Equal(t, "a%252eb@x%2Eio", UserKey("a%2Eb@x.io"))
	assert.NotEqual(t, UserKey("a.b@x.io"), UserKey("a%2Eb@x.io"))
	assert.NotContains(t, UserKey("first.last@sub.example.co.uk"), ".")
}
