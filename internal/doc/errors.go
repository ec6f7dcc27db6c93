package doc

import "errors"

// Causes of the errors this package returns. Every error is an *errs.Error
// whose code is InvalidArgument (the change is malformed whatever the state)
// or FailedPrecondition (the change does not fit the current state); it
// wraps one of these, so errors.Is tells them apart locally. Across the wire
// only the code and the message survive.
var (
	// ErrPartition (InvalidArgument): the partition is out of range, or the
	// key's top-level segment belongs to another partition.
	ErrPartition = errors.New("wrong partition")
	// ErrPath (InvalidArgument): the path cannot be used with this record
	// type, or it is nested deeper than a value may be.
	ErrPath = errors.New("invalid path")
	// ErrValue (InvalidArgument): the value is missing, is not exactly one
	// well-formed msgpack value, or holds a map whose keys are not strings.
	ErrValue = errors.New("invalid value")
	// ErrType (InvalidArgument): the record type is not ADD, UPDATE or REMOVE.
	ErrType = errors.New("unknown record type")
	// ErrNotContainer (FailedPrecondition): the path goes through a value
	// that is neither a map nor an array.
	ErrNotContainer = errors.New("path goes through a scalar")
	// ErrIndex (FailedPrecondition): an array segment is not an index in
	// range (or "-" where ADD allows it).
	ErrIndex = errors.New("array index out of range")
	// ErrNotArray (FailedPrecondition): a push (ADD at "-") to a value that
	// is neither an array nor missing.
	ErrNotArray = errors.New("push to a value that is not an array")
	// ErrExists (FailedPrecondition): ADD of a map key that already exists.
	ErrExists = errors.New("key already exists")
	// ErrSnapshot (InvalidArgument): Restore was given bytes that are not a
	// snapshot of this partition.
	ErrSnapshot = errors.New("invalid snapshot")
	// ErrVersion (FailedPrecondition): a change's condition (Change.Cond)
	// does not hold: its top-level key is at another version. The error
	// carries the current version (VersionOf).
	ErrVersion = errors.New("version mismatch")
	// ErrBatch (InvalidArgument): bytes that are not a batch (DecodeBatch),
	// or a batch with no changes or too many.
	ErrBatch = errors.New("invalid batch")
)

// ErrOption (InvalidArgument): New was given an option out of range.
var ErrOption = errors.New("invalid store option")
