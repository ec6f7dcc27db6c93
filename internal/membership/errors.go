package membership

import "errors"

// Errors returned by this package; match them with errors.Is.
var (
	// ErrInvalidOption: an option is out of range; the message says which.
	ErrInvalidOption = errors.New("fero: invalid membership option")
	// ErrInvalidMeta: node metadata is malformed, too large, or has a field
	// out of range.
	ErrInvalidMeta = errors.New("fero: invalid node metadata")
	// ErrForeignResource: a peer serves another resource and is refused.
	ErrForeignResource = errors.New("fero: peer serves another resource")
	// ErrNotStarted: the call needs Start first.
	ErrNotStarted = errors.New("fero: membership not started")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("fero: membership already started")
	// ErrClosed: the membership was closed.
	ErrClosed = errors.New("fero: membership closed")
	// ErrNoPeers: a join reached none of the given addresses.
	ErrNoPeers = errors.New("fero: no peer reachable")
)
