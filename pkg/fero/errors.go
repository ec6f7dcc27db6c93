package fero

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/wire"
)

// Error is an error with a [Code]. Errors returned by a remote node arrive
// as *Error with the code and message the remote side gave; their causes
// stay on that side.
type Error = errs.Error

// Code classifies an [Error]. Codes 1–16 follow the familiar RPC set; a
// service may use any other value for its own conditions (the original's
// HTTP-like statuses, such as 405, fit as they are).
type Code = errs.Code

// The predefined codes.
const (
	CodeOK                 = errs.OK
	CodeCanceled           = errs.Canceled
	CodeUnknown            = errs.Unknown
	CodeInvalidArgument    = errs.InvalidArgument
	CodeDeadlineExceeded   = errs.DeadlineExceeded
	CodeNotFound           = errs.NotFound
	CodeAlreadyExists      = errs.AlreadyExists
	CodePermissionDenied   = errs.PermissionDenied
	CodeResourceExhausted  = errs.ResourceExhausted
	CodeFailedPrecondition = errs.FailedPrecondition
	CodeAborted            = errs.Aborted
	CodeOutOfRange         = errs.OutOfRange
	CodeUnimplemented      = errs.Unimplemented
	CodeInternal           = errs.Internal
	CodeUnavailable        = errs.Unavailable
	CodeDataLoss           = errs.DataLoss
	CodeUnauthenticated    = errs.Unauthenticated
)

// NewError returns an error with the given code and message.
func NewError(code Code, msg string) *Error { return errs.New(code, msg) }

// Errorf returns an error with the given code and a formatted message; %w
// verbs wrap their operands, which errors.Is and errors.As see locally.
func Errorf(code Code, format string, args ...any) *Error { return errs.Errorf(code, format, args...) }

// CodeOf returns err's code: its own if it is or wraps an *Error,
// CodeCanceled or CodeDeadlineExceeded for context errors, CodeOK for nil
// and CodeUnknown for anything else.
func CodeOf(err error) Code { return errs.CodeOf(err) }

// Definite reports whether err, returned by a write, says for certain that
// the write was not applied and never will be, so retrying it is safe:
// CodeUnavailable (no quorum, not the owner, its deadline passed before any
// node committed it, …) and the refusals before commit (CodeInvalidArgument,
// CodeFailedPrecondition, CodeAlreadyExists, CodeNotFound, …). Any other
// error is indefinite: the write may have taken effect, but only before the
// error was returned — no node applies a write after its caller has an
// answer. CodeDeadlineExceeded, CodeAborted (the owner lost the partition
// after committing; the node closed; the connection broke) and
// CodeCanceled are indefinite. A canceled context is the one exception to
// "before the answer": a write whose context is canceled before its
// deadline may still take effect until that deadline.
func Definite(err error) bool { return errs.Definite(err) }

// ErrorDetail is a typed value a handler attaches to an error, for the
// caller to act on (which item is out of stock, how long to wait): a
// type name both sides agree on (say "shop.OutOfStock") and the value,
// encoded with msgpack. Details cross the wire with the code and the
// message, through a forwarding node too: at most 16, type names of 1 to
// 256 bytes, 64 KiB together (more are dropped, and the message says so).
type ErrorDetail = errs.Detail

// NewErrorDetail encodes v with msgpack as a detail named typ; attach it
// with (*Error).WithDetail:
//
//	d, err := fero.NewErrorDetail("shop.OutOfStock", OutOfStock{SKU: sku, Left: 0})
//	return nil, fero.Errorf(fero.CodeFailedPrecondition, "out of stock").WithDetail(d)
func NewErrorDetail(typ string, v any) (ErrorDetail, error) {
	if typ == "" || len(typ) > errs.MaxDetailType {
		return ErrorDetail{}, errs.Errorf(errs.InvalidArgument, "fero: error detail type %q: want 1 to %d bytes", typ, errs.MaxDetailType)
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return ErrorDetail{}, errs.Errorf(errs.InvalidArgument, "fero: encode error detail %s: %w", typ, err)
	}
	return ErrorDetail{Type: typ, Value: b}, nil
}

// ErrorDetails returns the details of the *Error err is or wraps, in the
// order they were attached.
func ErrorDetails(err error) []ErrorDetail { return errs.DetailsOf(err) }

// DecodeErrorDetail decodes d's value into v, a pointer.
func DecodeErrorDetail(d ErrorDetail, v any) error {
	if err := wire.DecodeValue(d.Value, v); err != nil {
		return errs.Errorf(errs.InvalidArgument, "fero: decode error detail %s: %w", d.Type, err)
	}
	return nil
}
