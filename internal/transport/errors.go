package transport

import (
	"errors"

	"github.com/fero-go/fero/internal/errs"
)

var (
	// ErrClosed is returned by calls on a connection, peer or server that
	// was closed locally.
	ErrClosed = errs.New(errs.Unavailable, "transport closed")
	// ErrConnLost is wrapped by the error of every call that was in flight
	// when its connection broke, or was closed on this side
	// (ErrClosedInFlight).
	ErrConnLost = errors.New("connection lost")
	// ErrClosedInFlight fails a call still waiting for its answer when its
	// connection is closed on this side: the peer may have carried it out,
	// so it is indefinite (Aborted), unlike ErrClosed, which fails a call
	// that never left. It wraps ErrClosed and ErrConnLost.
	ErrClosedInFlight = errs.Errorf(errs.Aborted, "%w with the call in flight (%w)", ErrClosed, ErrConnLost)
	// ErrOutboxFull is returned by a FailFast call when the outbox is full.
	ErrOutboxFull = errs.New(errs.ResourceExhausted, "outbox full")
	// ErrUnavailable is returned by a FailFast call on a Peer that is
	// reconnecting, and by any call on a Peer that exhausted its retries.
	ErrUnavailable = errs.New(errs.Unavailable, "peer unavailable")
	// ErrTooLarge is returned for a payload over the frame limit.
	ErrTooLarge = errs.New(errs.InvalidArgument, "payload exceeds the frame limit")
	// ErrNotStream is returned by Request.Chunk on a call that did not ask
	// for a stream.
	ErrNotStream = errs.New(errs.FailedPrecondition, "call is not a stream")
	// ErrReplied is returned when a request is answered a second time.
	ErrReplied = errs.New(errs.FailedPrecondition, "request already answered")
	// ErrTooManyConns is returned by Conn.Prove when the server holds as
	// many proved connections as it takes (WithMaxConns,
	// WithMaxConnsPerIP).
	ErrTooManyConns = errs.New(errs.ResourceExhausted, "too many connections")
	// ErrAuthTimeout ends a connection that proved nothing within the auth
	// timeout (WithAuthTimeout).
	ErrAuthTimeout = errors.New("proved nothing within the auth timeout")
	// errEvicted ends an unproved connection whose place a newcomer took
	// (WithMaxUnprovedConns).
	errEvicted = errors.New("closed for a newer connection: too many unproved connections")
)
