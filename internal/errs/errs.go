// Package errs owns fero's coded error: the one error type that crosses
// the wire. pkg/fero re-exports it; internal packages create and inspect it
// here so they need not import the public package.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Code classifies an error. Codes 1–16 follow the familiar RPC set; a
// service may use any other value for its own conditions (the original's
// HTTP-like statuses such as 405 fit as they are).
type Code uint32

// The predefined codes.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

var codeNames = [...]string{
	OK: "ok", Canceled: "canceled", Unknown: "unknown", InvalidArgument: "invalid_argument",
	DeadlineExceeded: "deadline_exceeded", NotFound: "not_found", AlreadyExists: "already_exists",
	PermissionDenied: "permission_denied", ResourceExhausted: "resource_exhausted",
	FailedPrecondition: "failed_precondition", Aborted: "aborted", OutOfRange: "out_of_range",
	Unimplemented: "unimplemented", Internal: "internal", Unavailable: "unavailable",
	DataLoss: "data_loss", Unauthenticated: "unauthenticated",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "code_" + strconv.FormatUint(uint64(c), 10)
}

// Error is an error with a code. The code, the message and the details
// cross the wire; the wrapped cause stays local.
type Error struct {
	code    Code
	msg     string
	cause   error
	remote  bool
	details []Detail
}

// Detail is a typed value attached to an error (as connect's ErrorDetail
// is): a type name the two ends agree on and the value's msgpack
// encoding.
type Detail struct {
	Type  string
	Value []byte
}

// Bounds on an error's details as they cross the wire.
const (
	MaxDetails      = 16
	MaxDetailType   = 256
	MaxDetailsBytes = 64 << 10 // the values and type names together
)

// WithDetail returns a copy of e with d added to its details; e itself is
// unchanged (it may be a shared sentinel).
func (e *Error) WithDetail(d Detail) *Error {
	c := *e
	c.details = append(e.details[:len(e.details):len(e.details)], d)
	return &c
}

// Details returns e's details, in the order they were added.
func (e *Error) Details() []Detail { return e.details }

// DetailsOf returns the details of the *Error err is or wraps.
func DetailsOf(err error) []Detail {
	var e *Error
	if errors.As(err, &e) {
		return e.details
	}
	return nil
}

// New returns an error with the given code and message.
func New(code Code, msg string) *Error { return &Error{code: code, msg: msg} }

// Errorf formats a message; %w verbs wrap their operands as causes, which
// errors.Is and errors.As see locally.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{code: code, msg: err.Error()}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.cause = err
	}
	return e
}

// Wrapf returns an error with e's code whose message is e's followed by
// ": " and the formatted detail. errors.Is matches it with e on this node;
// across the wire only the code and the message travel, and the message
// still starts with e's.
func Wrapf(e *Error, format string, args ...any) *Error {
	return &Error{code: e.code, msg: e.msg + ": " + fmt.Sprintf(format, args...), cause: e, details: e.details}
}

// FromWire rebuilds an error received from a peer.
func FromWire(code uint32, msg string, details []Detail) *Error {
	return &Error{code: Code(code), msg: msg, remote: true, details: details}
}

// Code returns the error's code.
func (e *Error) Code() Code { return e.code }

// Message returns the message without the code prefix.
func (e *Error) Message() string { return e.msg }

// Remote reports whether the error was received from a peer.
func (e *Error) Remote() bool { return e.remote }

func (e *Error) Error() string {
	if e.msg == "" {
		return "fero: " + e.code.String()
	}
	return "fero: " + e.code.String() + ": " + e.msg
}

func (e *Error) Unwrap() error { return e.cause }

// Is lets errors.Is match two coded errors by code and message, so a
// sentinel still matches after it has crossed the wire.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.code == e.code && t.msg == e.msg
}

// Definite reports whether err says for certain that the write it answers
// was not applied, and never will be, so that retrying it is safe: a
// refusal before commit. Any other error is indefinite: the write may have
// taken effect (before the answer; docs/engine.md, rules 11 and 12). nil is
// not a definite error.
func Definite(err error) bool {
	switch CodeOf(err) {
	case Unavailable, InvalidArgument, FailedPrecondition, AlreadyExists, NotFound, OutOfRange,
		Unimplemented, PermissionDenied, Unauthenticated, ResourceExhausted:
		return true
	}
	return false
}

// CodeOf returns the code of err: its own if it is or wraps an *Error,
// Canceled or DeadlineExceeded for context errors, OK for nil and Unknown
// otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	}
	return Unknown
}

// MessageOf returns the message to send for err: an *Error's message, or
// err.Error() for any other error.
func MessageOf(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	if full, inner := err.Error(), e.Error(); full != inner && strings.Contains(full, inner) {
		// A coded error wrapped with context ("login: %w"): keep the
		// context, drop the inner error's code prefix.
		return strings.Replace(full, inner, e.msg, 1)
	}
	return e.msg
}
