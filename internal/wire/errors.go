package wire

import "errors"

var (
	// ErrMalformed reports bytes that are not a valid frame or record.
	ErrMalformed = errors.New("fero: malformed frame")
	// ErrFrameTooLarge reports a frame longer than the configured maximum.
	ErrFrameTooLarge = errors.New("fero: frame too large")
	// ErrFrameTimeout reports a frame that did not arrive whole in time
	// (see Reader.SetFrameTimeout).
	ErrFrameTimeout = errors.New("fero: frame timed out")
)
