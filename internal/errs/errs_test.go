package errs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCodeOf(t *testing.T) {
	assert.Equal(t, OK, CodeOf(nil))
	assert.Equal(t, NotFound, CodeOf(New(NotFound, "no such key")))
	assert.Equal(t, NotFound, CodeOf(fmt.Errorf("get: %w", New(NotFound, "x"))))
	assert.Equal(t, Canceled, CodeOf(fmt.Errorf("wait: %w", context.Canceled)))
	assert.Equal(t, DeadlineExceeded, CodeOf(context.DeadlineExceeded))
	assert.Equal(t, Unknown, CodeOf(io.EOF))
}

func TestErrorText(t *testing.T) {
	assert.Equal(t, "fero: unimplemented: verb FOO", New(Unimplemented, "verb FOO").Error())
	assert.Equal(t, "fero: unavailable", New(Unavailable, "").Error())
	assert.Equal(t, "fero: code_405: method not allowed", New(405, "method not allowed").Error())
}

func TestWrapAndWire(t *testing.T) {
	e := Errorf(Unavailable, "dial %s: %w", "10.0.0.1", io.ErrClosedPipe)
	assert.ErrorIs(t, e, io.ErrClosedPipe, "the local cause is kept")
	back := FromWire(uint32(e.Code()), e.Message(), nil)
	assert.True(t, back.Remote())
	assert.ErrorIs(t, back, e, "a coded error matches after crossing the wire")
	assert.False(t, errors.Is(back, io.ErrClosedPipe), "the cause does not cross the wire")
	assert.Equal(t, "boom", MessageOf(errors.New("boom")))

	sentinel := errors.New("lost")
	two := Errorf(Unavailable, "%w: %w", sentinel, io.EOF)
	assert.ErrorIs(t, two, sentinel)
	assert.ErrorIs(t, two, io.EOF)
	assert.Nil(t, New(NotFound, "x").Unwrap())
}

func TestWrapfKeepsTheSentinel(t *testing.T) {
	sentinel := New(Unavailable, "no quorum")
	err := Wrapf(sentinel, "server %s sees %d", "a", 1)
	assert.Equal(t, "fero: unavailable: no quorum: server a sees 1", err.Error())
	assert.Equal(t, "no quorum: server a sees 1", MessageOf(err))
	assert.Equal(t, Unavailable, CodeOf(err))
	assert.ErrorIs(t, err, sentinel)
	assert.ErrorIs(t, fmt.Errorf("write: %w", err), sentinel)
	assert.NotErrorIs(t, FromWire(uint32(Unavailable), MessageOf(err), nil), sentinel, "only the code and message cross the wire")
}

func TestMessageOfKeepsWrappingContext(t *testing.T) {
	inner := New(PermissionDenied, "wrong password")
	if got := MessageOf(fmt.Errorf("login ada: %w", inner)); got != "login ada: wrong password" {
		t.Fatalf("MessageOf = %q", got)
	}
	if got := MessageOf(inner); got != "wrong password" {
		t.Fatalf("MessageOf = %q", got)
	}
}

func TestDefinite(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{New(Unavailable, "no quorum"), true},
		{New(FailedPrecondition, "key exists"), true},
		{New(DeadlineExceeded, "write timed out"), false},
		{New(Aborted, "ownership lost"), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("connection reset"), false},
		{fmt.Errorf("wrapped: %w", New(InvalidArgument, "bad")), true},
		{FromWire(uint32(Unavailable), "not owner, ring changing", nil), true},
	} {
		if got := Definite(c.err); got != c.want {
			t.Errorf("Definite(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
